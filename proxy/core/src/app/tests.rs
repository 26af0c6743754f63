//! The app on sockets the test bound: it serves on them, and stops when asked.

use super::*;
use crate::config::ServeArgs;

#[tokio::test]
async fn it_serves_on_the_sockets_it_is_given_and_stops_when_asked() {
    let any = "127.0.0.1:0".parse().unwrap();
    let sockets = Sockets::bind(&Listeners {
        proxy: any,
        admin: any,
    })
    .await
    .unwrap();
    let (proxy, admin) = (
        sockets.proxy.local_addr().unwrap(),
        sockets.admin.local_addr().unwrap(),
    );
    let config = ServeArgs {
        // a local server that is never there: the app starts anyway, and is not ready
        local: Some("http://127.0.0.1:1".to_owned()),
        ..ServeArgs::default()
    }
    .load()
    .unwrap();
    let running = start(&config, sockets, Tracer::none()).await.unwrap();
    assert_eq!((running.listen, running.admin), (proxy, admin));

    let healthz = async {
        let mut tcp = tokio::net::TcpStream::connect(admin).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), healthz)
        .await
        .expect("answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    tokio::time::timeout(std::time::Duration::from_secs(20), running.shutdown())
        .await
        .expect("stopped");
    assert!(
        tokio::net::TcpStream::connect(proxy).await.is_err(),
        "the proxy listener is closed"
    );
}
