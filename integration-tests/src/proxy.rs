//! A TCP proxy a test can cut: the coordinator reaches PostgreSQL through it,
//! and [`Proxy::cut`] closes every connection and refuses new ones (the
//! database is gone, from the coordinator's side) until [`Proxy::restore`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Proxy {
    /// `127.0.0.1:<port>` to dial instead of the upstream.
    pub addr: String,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    /// Forwards connections on a fresh port to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let upstream = upstream.to_string();
        let accept = {
            let (cut, links) = (cut.clone(), links.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        continue; // dropped: the connection is refused
                    }
                    let upstream = upstream.clone();
                    let link = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(&upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    let mut links = links.lock().unwrap_or_else(|p| p.into_inner());
                    links.retain(|l| !l.is_finished());
                    links.push(link.abort_handle());
                }
            })
            .abort_handle()
        };
        Proxy {
            addr,
            cut,
            links,
            accept,
        }
    }

    /// Closes every open connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            link.abort();
        }
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
