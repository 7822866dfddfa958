//! The route table a Router serves, and its fan-out, as a person reads it.

use kube::ResourceExt;
use switchyard_crds::Manager;
use switchyard_crds::manager::DeliveryMode;
use switchyard_crds::subscription::pattern_matches;
use switchyard_crds::yaml::Objects;

/// Prints one table per Router: match, event type, handling Manager; then who observes what.
pub fn print(objs: &Objects) {
    for r in &objs.routers {
        println!("Router {}", r.name_any());
        println!("  {:<7} {:<32} {:<24} MANAGER", "KIND", "MATCH", "EVENT");
        let mine: Vec<&Manager> = objs
            .managers
            .iter()
            .filter(|m| m.spec.router_ref.name == r.name_any())
            .collect();
        for route in &r.spec.routes {
            let (kind, matched) = if let Some(h) = &route.http {
                ("http", format!("{} {}", h.method.as_str(), h.path))
            } else if let Some(w) = &route.websocket {
                ("ws", w.command.clone())
            } else if let Some(g) = &route.grpc {
                ("grpc", g.method.clone())
            } else {
                ("?", String::new())
            };
            let manager =
                handler_of(&mine, route.event.as_str()).unwrap_or_else(|| "<none: 503>".into());
            println!("  {kind:<7} {matched:<32} {:<24} {manager}", route.event);
        }
        print_fan_out(&mine);
    }
}

/// The Manager that handles `event` (the first by name, as the operator chooses).
fn handler_of(managers: &[&Manager], event: &str) -> Option<String> {
    let mut names: Vec<String> = managers
        .iter()
        .filter(|m| m.spec.events.iter().any(|e| e.as_str() == event))
        .map(|m| m.name_any())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// One line per subscription: the event (or pattern), the handler of the types it covers, the
/// subscriber, what it observes and its filter.
fn print_fan_out(managers: &[&Manager]) {
    let mut lines = Vec::new();
    for m in managers {
        for s in &m.spec.subscriptions {
            let handlers: Vec<String> = {
                let mut h: Vec<String> = managers
                    .iter()
                    .flat_map(|o| o.spec.events.iter())
                    .filter(|e| pattern_matches(&s.event, e.as_str()))
                    .filter_map(|e| handler_of(managers, e.as_str()))
                    .collect();
                h.sort();
                h.dedup();
                h
            };
            let observe: Vec<&str> = s.observe.iter().map(|o| o.as_str()).collect();
            let mut observe = observe.join(",");
            if s.delivery == DeliveryMode::Durable {
                observe.push_str(" (durable)");
            }
            let filter = s
                .filter
                .as_ref()
                .and_then(|f| serde_json::to_string(f).ok())
                .unwrap_or_else(|| "-".into());
            let handler = if handlers.is_empty() {
                "-".to_owned()
            } else {
                handlers.join(",")
            };
            lines.push((s.event.clone(), handler, m.name_any(), observe, filter));
        }
    }
    if lines.is_empty() {
        return;
    }
    lines.sort();
    println!("  fan-out: each subscriber gets its own copy; the handler answers requests");
    println!(
        "  {:<24} {:<16} {:<16} {:<22} FILTER",
        "EVENT", "HANDLER", "SUBSCRIBER", "OBSERVE"
    );
    for (event, handler, sub, observe, filter) in lines {
        println!("  {event:<24} {handler:<16} {sub:<16} {observe:<22} {filter}");
    }
}
