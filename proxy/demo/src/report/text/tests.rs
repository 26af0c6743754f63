use super::*;

#[test]
fn tables_align_words_left_and_numbers_right_without_trailing_spaces() {
    let mut w = String::new();
    let rows = vec![
        vec!["kubectl".to_owned(), "7".to_owned(), "-".to_owned()],
        vec![
            "flowschema-tuner".to_owned(),
            "1234".to_owned(),
            String::new(),
        ],
    ];
    table(&mut w, &["client", "requests", "p99"], &rows, 1);
    assert_eq!(
        w,
        "client            requests  p99\n\
         kubectl                  7    -\n\
         flowschema-tuner      1234\n"
    );
}

#[test]
fn a_clients_gvrs_are_the_most_requested_first_then_how_many_more() {
    let gvrs = BTreeMap::from([
        ("apps/v1/deployments".to_owned(), 2),
        ("v1/pods".to_owned(), 5),
        ("batch/v1/jobs".to_owned(), 2),
        ("v1/events".to_owned(), 1),
    ]);
    assert_eq!(
        top_gvrs(&gvrs, 3),
        "v1/pods 5 · apps/v1/deployments 2 · batch/v1/jobs 2 · 1 more"
    );
    assert_eq!(top_gvrs(&gvrs, 4).matches(" · ").count(), 3);
    assert!(!top_gvrs(&gvrs, 4).contains("more"));
}

#[test]
fn counts_by_key_read_largest_first_or_none() {
    let by_peer = BTreeMap::from([("apiserver-1".to_owned(), 1), ("apiserver-3".to_owned(), 4)]);
    assert_eq!(joined(&by_peer), "apiserver-3 4 · apiserver-1 1");
    assert_eq!(joined(&BTreeMap::new()), "none");
}

#[test]
fn latencies_show_two_decimals_or_a_dash() {
    assert_eq!(ms(Some(6.346)), "6.35");
    assert_eq!(ms_unit(Some(0.4)), "0.40 ms");
    assert_eq!((ms(None), ms_unit(None)), ("-".to_owned(), "-".to_owned()));
}
