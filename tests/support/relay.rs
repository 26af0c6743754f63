//! A TCP relay in front of a server that can be told to stall: from then on, nothing more
//! that clients send reaches the server (on connections old and new), and so no answer
//! comes back. A peer that accepts connections and then hangs, as a wedged API server does;
//! told to resume, it forwards what it held, as a stopped process that continues reads it.
//! Told to cut, it closes every connection open through it at once (a server that crashed
//! in the middle of an exchange), and counts the bytes it forwarded to the server, so that a
//! test can cut a request it knows has begun to arrive.
//!
//! Aimed elsewhere ([`Relay::aim`]), it relays new connections to another server: a peer that
//! restarts answering differently on the same address.
//!
//! A relay can also be bound before its server exists ([`Relay::bind`]): two `mvproxy`
//! processes that are each other's peer cannot both learn the other's address from its
//! startup line before starting, so one of them dials the other through a relay whose
//! address the OS gave the test, pointed at the real address once that is known. Nothing
//! binds a port found free earlier (another process could take it in between).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A relay bound to a loopback port but not yet relaying: connections wait in the listen
/// backlog until [`Unaimed::to`] names the target.
pub struct Unaimed {
    listener: TcpListener,
    /// The address clients dial.
    pub addr: SocketAddr,
}

impl Unaimed {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts relaying to `target`, including connections that waited so far.
    pub fn to(self, target: SocketAddr) -> Relay {
        Relay::serve(self.listener, target)
    }
}

/// A running relay; stopped when dropped.
pub struct Relay {
    pub addr: SocketAddr,
    /// Where new connections go.
    target: watch::Sender<SocketAddr>,
    stalled: watch::Sender<bool>,
    /// Bumped to close every connection open at that moment.
    cuts: watch::Sender<u64>,
    /// Bytes forwarded from clients to the server.
    forwarded: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// Relays loopback connections to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        Relay::bind().await.to(target)
    }

    /// Binds a relay on a loopback port the OS picks, to be pointed at its target later.
    pub async fn bind() -> Unaimed {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        Unaimed { listener, addr }
    }

    fn serve(listener: TcpListener, target: SocketAddr) -> Relay {
        let addr = listener.local_addr().expect("relay addr");
        let (target, target_rx) = watch::channel(target);
        let (stalled, rx) = watch::channel(false);
        let (cuts, cut_rx) = watch::channel(0);
        let forwarded = Arc::new(AtomicUsize::new(0));
        let counted = forwarded.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut cut = cut_rx.clone();
                cut.mark_unchanged();
                let to = *target_rx.borrow();
                let relayed = relay(client, to, rx.clone(), counted.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = relayed => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay {
            addr,
            target,
            stalled,
            cuts,
            forwarded,
            accept,
        }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Relays connections accepted from now on to `target` (those open stay where they are:
    /// [`Relay::cut`] closes them).
    pub fn aim(&self, target: SocketAddr) {
        self.target.send_replace(target);
    }

    /// Stops forwarding what clients send.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, what was held first (a stopped process continued: what its clients
    /// sent meanwhile is read then).
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Closes every connection open through the relay now, both ways; later ones are relayed.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Bytes forwarded from clients to the server so far.
    pub fn forwarded(&self) -> usize {
        self.forwarded.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(
    client: TcpStream,
    target: SocketAddr,
    mut stalled: watch::Receiver<bool>,
    forwarded: Arc<AtomicUsize>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = server.into_split();
    // The server's side stays open until the server is done with it (it closes, or its answer
    // finds the client gone): a request it received while its client went away is still read
    // and processed, as a server that continues after a stop processes what it had received.
    let upstream = async move {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match client_r.read(&mut buf).await {
                Ok(0) | Err(_) => return server_w,
                Ok(n) => n,
            };
            // while stalled, hold what arrived (forever)
            if stalled.wait_for(|s| !*s).await.is_err() {
                return server_w;
            }
            if server_w.write_all(&buf[..n]).await.is_err() {
                return server_w;
            }
            forwarded.fetch_add(n, Ordering::SeqCst);
        }
    };
    let downstream = async move {
        let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
    };
    let (_server_w, ()) = tokio::join!(upstream, downstream);
}
