use std::time::Duration;

use http::StatusCode;

use super::*;

#[test]
fn which_failures_are_retried() {
    let status = |code: u16, retry_after| ExportError::Status {
        status: StatusCode::from_u16(code).unwrap(),
        retry_after,
    };
    let grpc = |code, retry_after| ExportError::Grpc {
        code,
        message: String::new(),
        retry_after,
    };
    let later = Some(Duration::from_secs(2));
    for (e, want) in [
        (status(503, later), Retry::Yes(later)),
        (status(429, None), Retry::Yes(None)),
        (status(502, None), Retry::Yes(None)),
        (status(504, None), Retry::Yes(None)),
        (status(400, None), Retry::No),
        (status(401, None), Retry::No),
        (status(500, None), Retry::No),
        (grpc(14, None), Retry::Yes(None)),
        (grpc(4, None), Retry::Yes(None)),
        (grpc(8, None), Retry::No),
        (grpc(8, later), Retry::Yes(later)),
        (grpc(3, None), Retry::No),
        (ExportError::Timeout(Duration::ZERO), Retry::Yes(None)),
    ] {
        assert_eq!(e.retry(), want, "{e}");
    }
}

#[test]
fn backoff_grows_to_its_cap_with_jitter() {
    let mut b = Backoff::new();
    for _ in 0..20 {
        assert!(b.wait() <= BACKOFF_CAP);
    }
    assert_eq!(b.next, BACKOFF_CAP);
}
