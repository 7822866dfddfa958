//! The route table a Router serves, as a person reads it.

use kube::ResourceExt;
use switchyard_crds::yaml::Objects;

/// Prints one table per Router: match, event type, handling Manager.
pub fn print(objs: &Objects) {
    for r in &objs.routers {
        println!("Router {}", r.name_any());
        println!("  {:<7} {:<32} {:<24} MANAGER", "KIND", "MATCH", "EVENT");
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
            let manager = objs
                .managers
                .iter()
                .find(|m| {
                    m.spec.router_ref.name == r.name_any() && m.spec.events.contains(&route.event)
                })
                .map(|m| m.name_any())
                .unwrap_or_else(|| "<none: 503>".into());
            println!("  {kind:<7} {matched:<32} {:<24} {manager}", route.event);
        }
    }
}
