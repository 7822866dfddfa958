//! The live screen of `switchyard top`: the event table, the subscription table (when there are
//! subscriptions) and the sidecar table, drawn with ratatui.

use super::stats::View;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table};

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// Draws `view`; `source` and `status` fill the title and the bottom line.
pub fn draw(frame: &mut Frame, view: &View, source: &str, status: &str) {
    let subs_height = match view.subscriptions.len() {
        0 => 0,
        n => n as u16 + 3,
    };
    let [events_area, subs_area, sidecars_area, help] = Layout::vertical([
        Constraint::Min(5),
        Constraint::Length(subs_height),
        Constraint::Length(view.sidecars.len() as u16 + 3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let header =
        |cells: &[&'static str]| Row::new(cells.iter().map(|c| Cell::from(*c))).style(bold);

    let rows = view.events.iter().map(|e| {
        Row::new(vec![
            Cell::from(e.event.clone()),
            Cell::from(e.role.clone()),
            Cell::from(format!("{:.1}", e.rate)),
            Cell::from(
                e.success
                    .map_or_else(|| "-".into(), |s| format!("{:.2}%", s * 100.0)),
            ),
            Cell::from(num(e.p50_ms, 3)),
            Cell::from(num(e.p99_ms, 3)),
        ])
    });
    let events = Table::new(
        rows,
        [
            Constraint::Min(16),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(header(&[
        "EVENT", "ROLE", "RPS", "SUCCESS", "P50 ms", "P99 ms",
    ]))
    .block(Block::bordered().title(format!(" switchyard top: {source} ")));
    frame.render_widget(events, events_area);

    let rows = view.subscriptions.iter().map(|s| {
        Row::new(vec![
            Cell::from(s.subscription.clone()),
            Cell::from(format!("{:.1}", s.rate)),
            Cell::from(
                s.success
                    .map_or_else(|| "-".into(), |v| format!("{:.2}%", v * 100.0)),
            ),
            Cell::from(num(s.p99_ms, 3)),
            Cell::from(format!("{:.1}", s.copies_sent)),
            Cell::from(format!("{:.1}", s.copies_shed)),
            Cell::from(format!("{:.1}", s.copies_failed)),
        ])
    });
    let subs = Table::new(
        rows,
        [
            Constraint::Min(20),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(10),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(13),
        ],
    )
    .header(header(&[
        "SUBSCRIPTION",
        "DELIV/S",
        "SUCCESS",
        "P99 ms",
        "COPIES/S",
        "SHED/S",
        "FAILED/S",
    ]))
    .block(
        Block::bordered()
            .title(" subscriptions (deliveries to the subscriber; copies sent to it) "),
    );
    frame.render_widget(subs, subs_area);

    let rows = view.sidecars.iter().map(|s| {
        Row::new(vec![
            Cell::from(s.role.clone()),
            Cell::from(s.name.clone()),
            Cell::from(num(s.in_flight, 0)),
            Cell::from(num(s.queued, 0)),
            Cell::from(num(s.held, 0)),
            Cell::from(s.error.clone().unwrap_or_else(|| s.address.clone())),
        ])
    });
    let sidecars = Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Min(16),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Min(20),
        ],
    )
    .header(header(&[
        "ROLE",
        "SIDECAR",
        "IN FLIGHT",
        "QUEUED",
        "HELD",
        "ADDRESS",
    ]))
    .block(Block::bordered().title(" sidecars "));
    frame.render_widget(sidecars, sidecars_area);
    frame.render_widget(Line::from(format!(" q: quit   {status}")), help);
}
