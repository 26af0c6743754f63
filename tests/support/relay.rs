//! A TCP relay in front of a server that can be told to stall: from then on, nothing more
//! that clients send reaches the server (on connections old and new), and so no answer
//! comes back. A peer that accepts connections and then hangs, as a wedged API server does.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running relay; stopped when dropped.
pub struct Relay {
    pub addr: SocketAddr,
    stalled: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// Relays loopback connections to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        let (stalled, rx) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target, rx.clone()));
            }
        });
        Relay {
            addr,
            stalled,
            accept,
        }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops forwarding what clients send.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, target: SocketAddr, mut stalled: watch::Receiver<bool>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = server.into_split();
    let upstream = async move {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match client_r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // while stalled, hold what arrived (forever)
            if stalled.wait_for(|s| !*s).await.is_err() {
                return;
            }
            if server_w.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let downstream = async move {
        let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
    };
    tokio::join!(upstream, downstream);
}
