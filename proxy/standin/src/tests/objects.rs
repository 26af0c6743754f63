//! Objects: create, get, list and delete in kube-apiserver's shapes, and its errors.

use super::*;

#[tokio::test]
async fn create_get_list_and_delete_have_kube_shapes() -> TestResult {
    let server = start("crud").await?;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());

    let created = post(
        &pods,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
    )
    .await?;
    assert_eq!(created.status, StatusCode::CREATED);
    let created = created.json()?;
    let meta = &created["metadata"];
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36));
    let first_rv: u64 = meta["resourceVersion"].as_str().ok_or("rv")?.parse()?;
    let timestamp = meta["creationTimestamp"].as_str().ok_or("timestamp")?;
    assert_eq!(
        (timestamp.len(), &timestamp[10..11], &timestamp[19..]),
        (20, "T", "Z")
    );

    let duplicate = post(&pods, &json!({"metadata": {"name": "a"}})).await?;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(
        duplicate.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"a\" already exists", "reason": "AlreadyExists",
               "details": {"name": "a", "kind": "pods"}, "code": 409})
    );

    let other = format!("{}/api/v1/namespaces/other/pods", server.url());
    let second = post(&other, &json!({"metadata": {"generateName": "b-"}}))
        .await?
        .json()?;
    let second_rv: u64 = second["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("rv")?
        .parse()?;
    assert!(second_rv > first_rv);
    assert!(
        second["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("b-") && n.len() == 7)
    );

    let got = get(&format!("{pods}/a"), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (got["kind"].clone(), got["metadata"]["name"].clone()),
        (json!("Pod"), json!("a"))
    );

    let all = get(&format!("{}/api/v1/pods", server.url()), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (all["kind"].clone(), all["apiVersion"].clone()),
        (json!("PodList"), json!("v1"))
    );
    assert_eq!(all["metadata"]["resourceVersion"], second_rv.to_string());
    assert_eq!(names(&all).len(), 2);
    assert!(all["items"].as_array().is_some_and(|i| {
        i.iter()
            .all(|o| o["kind"] == "Pod" && o["apiVersion"] == "v1")
    }));
    let default = get(&pods, "application/json").await?.json()?;
    assert_eq!(names(&default), ["a"]);

    let body = json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}}).to_string();
    let headers = [("content-type", "application/json")];
    let updated = send(Method::PUT, &format!("{pods}/a"), &headers, &body)
        .await?
        .json()?;
    assert_eq!(updated["spec"]["nodeName"], "n1");
    assert_eq!(updated["metadata"]["uid"], meta["uid"]);
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        meta["resourceVersion"]
    );

    let deleted = send(Method::DELETE, &format!("{pods}/a"), &[], "").await?;
    assert_eq!(deleted.status, StatusCode::OK);
    let gone = get(&format!("{pods}/a"), "application/json").await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        gone.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"a\" not found", "reason": "NotFound",
               "details": {"name": "a", "kind": "pods"}, "code": 404})
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_delete_of_an_object_with_finalizers_marks_it_until_they_are_removed() -> TestResult {
    let server = start("finalizers").await?;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    let object = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    assert_eq!(post(&pods, &object).await?.status, StatusCode::CREATED);

    let deleted = send(Method::DELETE, &format!("{pods}/held"), &[], "").await?;
    assert_eq!(deleted.status, StatusCode::OK);
    let deleted = deleted.json()?;
    assert_eq!(
        deleted["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let stamp = deleted["metadata"]["deletionTimestamp"].clone();
    assert!(stamp.is_string(), "{deleted}");
    // still there, marked; a second delete keeps the first timestamp
    let still = get(&format!("{pods}/held"), "application/json").await?;
    assert_eq!(still.status, StatusCode::OK);
    let again = send(Method::DELETE, &format!("{pods}/held"), &[], "")
        .await?
        .json()?;
    assert_eq!(again["metadata"]["deletionTimestamp"], stamp);

    // the controller's update that removes the last finalizer deletes it
    let body = json!({"metadata": {"name": "held", "finalizers": []}}).to_string();
    let headers = [("content-type", "application/json")];
    let released = send(Method::PUT, &format!("{pods}/held"), &headers, &body).await?;
    assert_eq!(released.status, StatusCode::OK);
    let gone = get(&format!("{pods}/held"), "application/json").await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn not_found_shapes_depend_on_what_is_missing() -> TestResult {
    let server = start("404").await?;
    let url = server.url();

    let missing = get(
        &format!("{url}/apis/apps/v1/namespaces/default/deployments/web"),
        "application/json",
    )
    .await?;
    assert_eq!(
        missing.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "deployments.apps \"web\" not found", "reason": "NotFound",
               "details": {"name": "web", "group": "apps", "kind": "deployments"}, "code": 404})
    );

    for path in [
        "/apis/apps/v1/widgets",
        "/api/v1/namespaces/default/widgets/x",
        "/api/v1/namespaces/default/pods/x/nope",
    ] {
        let reply = get(&format!("{url}{path}"), "application/json").await?;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.content_type(), "application/json", "{path}");
        assert_eq!(reply.body, NOT_SERVED, "{path}");
    }

    // 1.34 serves storagemigration v1alpha1, not the v1beta1 of 1.35.
    let later = get(
        &format!("{url}/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations"),
        "application/json",
    )
    .await?;
    assert_eq!(
        (later.status, later.body),
        (StatusCode::NOT_FOUND, Bytes::from("404 page not found\n"))
    );

    for path in ["/healthz", "/readyz", "/livez"] {
        let reply = get(&format!("{url}{path}"), "*/*").await?;
        assert_eq!(
            (reply.status, reply.body),
            (StatusCode::OK, Bytes::from("ok"))
        );
    }
    let version = get(&format!("{url}/version"), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (version["major"].clone(), version["minor"].clone()),
        (json!("1"), json!("34"))
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn objects_are_shared_across_versions_and_status_is_the_object() -> TestResult {
    let server = start("versions").await?;
    server.insert(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        Some("ns"),
        json!({"metadata": {"name": "h"}}),
    );
    let v1 = get(
        &format!(
            "{}/apis/autoscaling/v1/namespaces/ns/horizontalpodautoscalers/h",
            server.url()
        ),
        "application/json",
    )
    .await?
    .json()?;
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["kind"], "HorizontalPodAutoscaler");

    server.insert(
        "",
        "v1",
        "pods",
        None,
        json!({"metadata": {"name": "p", "namespace": "web"}}),
    );
    let status = get(
        &format!("{}/api/v1/namespaces/web/pods/p/status", server.url()),
        "application/json",
    )
    .await?;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(status.json()?["metadata"]["name"], "p");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn bad_input_gets_status_answers_not_panics() -> TestResult {
    let server = start("bad").await?;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    let cases: &[(Method, &str, &str, &str, StatusCode)] = &[
        (
            Method::POST,
            "",
            "application/json",
            "{",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "[1]",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":{}}",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":7}",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":{\"name\":\"x\",\"namespace\":\"other\"}}",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "",
            "application/yaml",
            "metadata: {}",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            Method::POST,
            "",
            "application/vnd.kubernetes.protobuf",
            "k8s\0\u{ff}",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            "/x",
            "application/merge-patch+json",
            "{}",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::PUT,
            "/missing",
            "application/json",
            "{\"metadata\":{\"name\":\"missing\"}}",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            "/a",
            "application/json",
            "{\"metadata\":{\"name\":\"b\"}}",
            StatusCode::BAD_REQUEST,
        ),
        (Method::GET, "/x/exec", "", "", StatusCode::BAD_REQUEST),
        (
            Method::GET,
            "?watch=true&resourceVersion=%zz&timeoutSeconds=1",
            "",
            "",
            StatusCode::OK,
        ),
    ];
    for (method, suffix, content_type, body, want) in cases {
        let headers = [("content-type", *content_type)];
        let reply = send(method.clone(), &format!("{pods}{suffix}"), &headers, body).await?;
        assert_eq!(reply.status, *want, "{method} {suffix} {body:?}");
    }
    let weird = [
        "/api/v1/namespaces",
        "/api/v1/namespaces/",
        "//api//v1",
        "/apis/apps/v1/namespaces/x",
        "/%ff",
        "/api/v1/nodes/n/status",
    ];
    for path in weird {
        let reply = get(&format!("{}{path}", server.url()), "application/json").await?;
        assert!(
            reply.status.is_success() || reply.status.is_client_error(),
            "{path}: {}",
            reply.status
        );
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn reads_of_an_undecodable_resource_fail_as_kube_apiserver_does_and_writes_do_not()
-> TestResult {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json")?;
    let server = StandIn::new("undecodable", &apis)?
        .undecodable("apps/v1beta9", "deployments", "Deployment")
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    let deployments = format!("{}/apis/apps/v1/namespaces/ns1/deployments", server.url());
    let created = post(
        &deployments,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
    )
    .await?;
    assert_eq!(created.status, StatusCode::CREATED);
    for (url, key) in [
        (
            deployments.clone(),
            "/registry/deployments/ns1/stored-earlier",
        ),
        (
            format!("{deployments}/web"),
            "/registry/deployments/ns1/web",
        ),
    ] {
        let r = get(&url, "application/json").await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{url}");
        let status = r.json()?;
        assert_eq!(status["reason"], "InternalError");
        assert_eq!(status["code"], 500);
        let message = status["message"].as_str().ok_or("message")?;
        assert!(
            message.starts_with(
                "failed to read one or more deployments.apps from the storage: StorageError: corrupt object"
            ),
            "{message}"
        );
        for part in [
            &format!("Key: {key},"),
            "object not decodable",
            r#"no kind "Deployment" is registered for version "apps/v1beta9""#,
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
    }
    // other resources of the group read as ever
    let r = get(
        &format!("{}/apis/apps/v1/namespaces/ns1/replicasets", server.url()),
        "application/json",
    )
    .await?;
    assert_eq!(r.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn a_group_taken_from_another_release_is_served_and_discovered() -> TestResult {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json")?;
    let podgroups = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups";
    let plain = StandIn::new("plain", &apis)?
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    assert_eq!(
        get(&format!("{}{podgroups}", plain.url()), "application/json")
            .await?
            .status,
        StatusCode::NOT_FOUND
    );

    let newer = fixture("kube-apiserver-1.36.3/aggregated_v2.json")?;
    let server = StandIn::new("mixed", &apis)?
        .group_of(&newer, "scheduling.k8s.io")?
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    let r = get(&format!("{}{podgroups}", server.url()), "application/json").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()?["kind"], "PodGroupList");
    let discovery = get(
        &format!("{}/apis", server.url()),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
    .await?
    .json()?;
    let groups: Vec<&str> = discovery["items"]
        .as_array()
        .ok_or("items")?
        .iter()
        .filter_map(|g| g["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        groups.iter().filter(|g| **g == "scheduling.k8s.io").count(),
        1,
        "{groups:?}"
    );
    assert!(groups.contains(&"apps"), "the rest is kept: {groups:?}");

    let missing = StandIn::new("missing", &apis)?.group_of(&newer, "nope.example.com");
    assert!(
        matches!(&missing, Err(crate::GroupOfError::NotServed(g)) if g == "nope.example.com"),
        "{missing:?}"
    );
    Ok(())
}
