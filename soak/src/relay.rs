//! A TCP relay on the peer hop that can stall: it stops moving bytes both ways on demand.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP relay to `target`; while stalled, nothing more clients send gets through (on old and
/// new connections), so no answer comes back: a wedged peer.
pub(crate) async fn relay(target: SocketAddr) -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let addr = listener.local_addr().expect("relay address");
    let (stalled, rx) = watch::channel(false);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(pipe(client, target, rx.clone()));
        }
    });
    (addr, stalled)
}

pub(crate) async fn pipe(
    client: TcpStream,
    target: SocketAddr,
    mut stalled: watch::Receiver<bool>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = server.into_split();
    let up = async move {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match client_r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if stalled.wait_for(|s| !*s).await.is_err() {
                return;
            }
            if server_w.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
    };
    tokio::join!(up, down);
}
