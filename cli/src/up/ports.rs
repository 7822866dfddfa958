//! Local ports for the processes `switchyard up` starts. Everything binds 127.0.0.1.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};

/// First port tried for apps whose declared port is taken, matching the default `app.port`.
pub const FIRST_APP_PORT: u16 = 8000;

/// Where ports come from; a trait so planning can be tested without binding sockets.
pub trait PortSource {
    /// A free port nobody asked for (admin endpoints, manager inbound).
    fn ephemeral(&mut self) -> anyhow::Result<u16>;
    /// Is `port` free on 127.0.0.1 and not yet handed out?
    fn available(&mut self, port: u16) -> bool;
    /// Records that `port` is used by a process of the plan.
    fn claim(&mut self, port: u16);

    /// `wanted` when available, else the first available port from [`FIRST_APP_PORT`] upward. Claims it.
    fn app(&mut self, wanted: u16) -> anyhow::Result<u16> {
        let port = if self.available(wanted) {
            wanted
        } else {
            (FIRST_APP_PORT..=u16::MAX)
                .find(|&p| self.available(p))
                .ok_or_else(|| anyhow::anyhow!("no free port from {FIRST_APP_PORT} upward"))?
        };
        self.claim(port);
        Ok(port)
    }
}

/// Ports probed by binding on 127.0.0.1.
///
/// A port found free is released before the child binds it, so another program could take it in between; the
/// child then fails to start and `switchyard up` says which. Handing the same port out twice within one run is
/// prevented by remembering the claimed ones.
#[derive(Default)]
pub struct LocalPorts {
    claimed: BTreeSet<u16>,
}

impl PortSource for LocalPorts {
    fn ephemeral(&mut self) -> anyhow::Result<u16> {
        for _ in 0..64 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            if self.claimed.insert(port) {
                return Ok(port);
            }
        }
        anyhow::bail!("could not find a free local port")
    }

    fn available(&mut self, port: u16) -> bool {
        port != 0
            && !self.claimed.contains(&port)
            && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
    }

    fn claim(&mut self, port: u16) {
        self.claimed.insert(port);
    }
}
