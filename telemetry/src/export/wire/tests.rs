use std::time::Duration;

use base64::Engine as _;
use prost::Message as _;

use super::*;

#[test]
fn retry_info_in_grpc_status_details() {
    let info = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: 3,
            nanos: 500_000_000,
        }),
    };
    let status = RpcStatus {
        code: 8,
        message: "slow down".into(),
        details: vec![ProtoAny {
            type_url: RETRY_INFO.into(),
            value: info.encode_to_vec(),
        }],
    };
    let bin = base64::engine::general_purpose::STANDARD.encode(status.encode_to_vec());
    assert_eq!(
        grpc_retry_delay(bin.as_bytes()),
        Some(Duration::from_millis(3500))
    );
    assert_eq!(grpc_retry_delay(b"not base64!"), None);
}
