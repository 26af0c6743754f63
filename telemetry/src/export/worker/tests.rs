use std::time::{Duration, Instant};

use super::*;

#[test]
fn one_warning_per_interval() {
    let mut t = Throttle::new(Duration::from_secs(30));
    let t0 = Instant::now();
    assert_eq!(t.permit(t0), Some(0));
    for s in 1..30 {
        assert_eq!(t.permit(t0 + Duration::from_secs(s)), None);
    }
    assert_eq!(
        t.permit(t0 + Duration::from_secs(30)),
        Some(29),
        "the next one says how many were held back"
    );
}
