//! A web page served on its own port (so its origin differs from the router's), for browser tests.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Serves `html` for every request until dropped.
pub struct Page {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Page {
    /// Serves `html` on a free port of 127.0.0.1.
    pub fn serve(html: String) -> Page {
        let listener = TcpListener::bind("127.0.0.1:0").expect("page listener");
        let port = listener.local_addr().expect("page addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                let Ok(mut s) = conn else { continue };
                // The request head fits one read; the page does not care what was asked.
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                    html.len()
                );
            }
        });
        Page {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`: the page's origin.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
