//! SVG plots of a run (plotters, SVG backend only): `/noop` req/s and p99 by concurrency, grouped bars for
//! the sections with variants, and RSS over time for the memory plateau.

use crate::results::Results;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (860, 480);

fn color(i: usize) -> PaletteColor<Palette99> {
    Palette99::pick(i)
}

/// One line per series over categorical x positions (`labels`); `None` points are skipped.
pub fn lines(
    path: &Path,
    title: &str,
    y_desc: &str,
    labels: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> anyhow::Result<()> {
    let ymax = series
        .iter()
        .flat_map(|(_, ys)| ys.iter().flatten().copied())
        .fold(0.0, f64::max)
        .max(1e-9);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax * 1.1)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&label_of)
        .y_desc(y_desc)
        .draw()?;
    for (i, (name, ys)) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = ys
            .iter()
            .enumerate()
            .filter_map(|(x, y)| Some((x as f64, (*y)?)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color(i).stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(i)));
        chart.draw_series(
            pts.into_iter()
                .map(|p| Circle::new(p, 3, color(i).filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Grouped bars: one group per variant, one bar per system in it.
pub fn bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[(String, Vec<(String, f64)>)],
) -> anyhow::Result<()> {
    let mut systems: Vec<String> = Vec::new();
    for (_, bars) in groups {
        for (s, _) in bars {
            if !systems.contains(s) {
                systems.push(s.clone());
            }
        }
    }
    let ymax = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|(_, v)| *v))
        .fold(0.0, f64::max)
        .max(1e-9);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax * 1.15)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            groups
                .get(i as usize)
                .map(|g| g.0.clone())
                .unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&label_of)
        .y_desc(y_desc)
        .draw()?;
    let width = 0.8 / systems.len().max(1) as f64;
    for (si, sys) in systems.iter().enumerate() {
        let rects: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(gi, (_, b))| {
                let v = b.iter().find(|(s, _)| s == sys)?.1;
                let x0 = gi as f64 - 0.4 + si as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, v)],
                    color(si).filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(sys.as_str())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(si).filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// RSS over time, one line per process of the series.
fn rss(path: &Path, title: &str, r: &Results, name: &str) -> anyhow::Result<bool> {
    let Some(series) = r.samples.get(name) else {
        return Ok(false);
    };
    let mut procs: Vec<(u32, String)> = Vec::new();
    for s in series {
        if !procs.iter().any(|(p, _)| *p == s.pid) {
            procs.push((s.pid, s.cmd.clone()));
        }
    }
    let tmax = series.iter().map(|s| s.t_s).fold(1.0, f64::max);
    let ymax = series.iter().map(|s| s.rss_mb).fold(1.0, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax * 1.2)?;
    chart
        .configure_mesh()
        .x_desc("s")
        .y_desc("RSS MiB")
        .draw()?;
    for (i, (pid, cmd)) in procs.iter().enumerate() {
        let pts: Vec<(f64, f64)> = series
            .iter()
            .filter(|s| s.pid == *pid)
            .map(|s| (s.t_s, s.rss_mb))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, color(i).stroke_width(2)))?
            .label(format!("{cmd} ({pid})"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(i)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(true)
}

/// Bars of req/s by variant and system for one section.
fn section_bars(
    dir: &Path,
    r: &Results,
    section: &str,
    title: &str,
) -> anyhow::Result<Option<PathBuf>> {
    let groups: Vec<(String, Vec<(String, f64)>)> = r
        .variants(section)
        .into_iter()
        .map(|v| {
            let bars = r
                .systems(section)
                .into_iter()
                .filter_map(|s| Some((s.clone(), r.find(section, &s, Some(&v), None)?.rps)))
                .collect();
            (v, bars)
        })
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    let path = dir.join(format!("{section}.svg"));
    bars(&path, title, "req/s", &groups)?;
    Ok(Some(path))
}

/// Draws every plot the run has data for into `dir`; returns the files written.
pub fn draw_all(dir: &Path, r: &Results) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    let cs = r.concurrencies("noop");
    if !cs.is_empty() {
        let labels: Vec<String> = cs.iter().map(|c| format!("c={c}")).collect();
        let series = |f: fn(&crate::report::Summary) -> f64| -> Vec<(String, Vec<Option<f64>>)> {
            r.systems("noop")
                .into_iter()
                .map(|s| {
                    let ys = cs
                        .iter()
                        .map(|c| r.find("noop", &s, None, Some(*c)).map(f))
                        .collect();
                    (s, ys)
                })
                .collect()
        };
        let p = dir.join("noop_rps.svg");
        lines(
            &p,
            "GET /noop: req/s by concurrency",
            "req/s",
            &labels,
            &series(|s| s.rps),
        )?;
        out.push(p);
        let p = dir.join("noop_p99.svg");
        lines(
            &p,
            "GET /noop: p99 latency by concurrency",
            "p99 µs",
            &labels,
            &series(|s| s.p99_us),
        )?;
        out.push(p);
    }
    for (section, title) in [
        ("protocols", "Switchyard vs raw servers by protocol (msg/s)"),
        ("payload", "Response size: Switchyard vs bare hyper (req/s)"),
        (
            "scaling",
            "Manager scaling: burn ~2 ms CPU (req/s by replicas)",
        ),
        (
            "middleware",
            "Middleware overhead (req/s by pass-through layers)",
        ),
    ] {
        if let Some(p) = section_bars(dir, r, section, title)? {
            out.push(p);
        }
    }
    for (name, title) in [
        ("plateau_sustained", "RSS during sustained load"),
        ("plateau_churn", "RSS during connection churn"),
    ] {
        let p = dir.join(format!("{name}.svg"));
        if rss(&p, title, r, name)? {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procs::Sample;
    use crate::results::run;

    #[test]
    fn draws_an_svg_per_section_with_data() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut r = Results {
            runs: vec![
                run("noop", "bare", None, 1, 10_000.0),
                run("noop", "bare", None, 32, 90_000.0),
                run("noop", "switchyard", None, 32, 30_000.0),
                run("payload", "bare", Some("1KB"), 8, 50_000.0),
                run("payload", "switchyard", Some("1KB"), 8, 20_000.0),
            ],
            ..Results::default()
        };
        r.samples.insert(
            "plateau_churn".into(),
            (0..5)
                .map(|i| Sample {
                    t_s: f64::from(i),
                    pid: 3,
                    cmd: "switchyard-sidecar router".into(),
                    rss_mb: 9.0,
                })
                .collect(),
        );
        let files = draw_all(dir.path(), &r)?;
        let names: Vec<String> = files
            .iter()
            .filter_map(|f| Some(f.file_name()?.to_str()?.to_owned()))
            .collect();
        assert_eq!(
            names,
            [
                "noop_rps.svg",
                "noop_p99.svg",
                "payload.svg",
                "plateau_churn.svg"
            ]
        );
        let svg = std::fs::read_to_string(dir.path().join("payload.svg"))?;
        assert!(svg.starts_with("<svg") && svg.contains("1KB") && svg.contains("switchyard"));
        Ok(())
    }
}
