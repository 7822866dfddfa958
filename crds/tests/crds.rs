//! The CRDs as the API server will see them: committed YAML is fresh, the quickstart is valid,
//! and the cross-field CEL rules reject what they should, with messages that name the field.

use kube::CustomResourceExt;
use kube::core::cel::validate_cel;
use switchyard_crds::{Manager, Router, crd, yaml};

fn quickstart() -> yaml::Objects {
    let text = include_str!("../../examples/quickstart.yaml");
    yaml::parse(text).expect("quickstart parses")
}

fn manager(patch: serde_json::Value) -> Manager {
    let mut m = serde_json::to_value(&quickstart().managers[0]).expect("serializes");
    json_merge(&mut m, patch);
    serde_json::from_value(m).expect("patched manager is well-formed")
}

fn router(patch: serde_json::Value) -> Router {
    let mut r = serde_json::to_value(&quickstart().routers[0]).expect("serializes");
    json_merge(&mut r, patch);
    serde_json::from_value(r).expect("patched router is well-formed")
}

/// RFC 7386 merge patch, enough to state each bad case as a small diff of the quickstart.
fn json_merge(target: &mut serde_json::Value, patch: serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    json_merge(t.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

fn cel_errors<T: CustomResourceExt + serde::Serialize>(obj: &T) -> String {
    match validate_cel(obj) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn committed_crd_yaml_is_fresh() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for (file, text) in crd::all_yaml().expect("renders") {
        let path = format!("{root}/{}/{file}", crd::CHART_DIR);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{path} is stale: run `cargo run -p switchyard-crds --bin crdgen` and commit the result"
        );
    }
}

/// The sidecar's test `every_path_the_crd_admits_is_a_delivery_target` draws its paths from this
/// pattern's characters: a change here must be made there too.
#[test]
fn the_app_path_pattern_is_the_one_the_sidecar_is_tested_against() {
    let crd = serde_json::to_value(Manager::crd()).expect("json");
    let path = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["app"]["properties"]["path"];
    assert_eq!(path["pattern"], "^/[A-Za-z0-9._~/-]*$", "{path}");
}

#[test]
fn crds_have_status_scale_short_names_and_printer_columns() {
    for (crd, short, cols) in [
        (Router::crd(), "rtr", vec!["Ready", "Routes", "Age"]),
        (
            Manager::crd(),
            "mgr",
            vec!["Ready", "Events", "Observes", "Replicas", "Age"],
        ),
    ] {
        let v = &crd.spec.versions[0];
        let sub = v.subresources.as_ref().expect("subresources");
        assert!(sub.status.is_some(), "{}", crd.spec.names.kind);
        let scale = sub.scale.as_ref().expect("scale subresource");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_owned()][..])
        );
        let names: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        for col in cols {
            assert!(
                names.contains(&col),
                "{} lacks column {col}: {names:?}",
                crd.spec.names.kind
            );
        }
    }
}

/// Fields whose type is Kubernetes' own, embedded without its descriptions to keep the CRD under the
/// annotation limit (`kubectl explain pod.spec` documents them): the field itself is described, the
/// fields inside it are not. Only Manager's pod template; every field Switchyard defines is described.
const EMBEDDED_KUBERNETES_TYPES: [(&str, &str); 1] = [("Manager", ".template")];

#[test]
fn every_spec_field_has_a_description() {
    fn walk(path: &str, schema: &serde_json::Value, kind: &str, missing: &mut Vec<String>) {
        if EMBEDDED_KUBERNETES_TYPES.contains(&(kind, path)) {
            return;
        }
        let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else {
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, kind, missing);
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                walk(&format!("{path}{{}}"), extra, kind, missing);
            }
            return;
        };
        for (name, sub) in props {
            let here = format!("{path}.{name}");
            if sub
                .get("description")
                .and_then(|d| d.as_str())
                .is_none_or(str::is_empty)
            {
                missing.push(here.clone());
            }
            walk(&here, sub, kind, missing);
        }
    }
    for crd in [Router::crd(), Manager::crd()] {
        let kind = crd.spec.names.kind.as_str();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
        let mut missing = vec![];
        walk(
            "",
            &schema["openAPIV3Schema"]["properties"]["spec"],
            kind,
            &mut missing,
        );
        walk(
            "",
            &schema["openAPIV3Schema"]["properties"]["status"],
            kind,
            &mut missing,
        );
        assert!(
            missing.is_empty(),
            "{} fields without description: {missing:?}",
            crd.spec.names.kind
        );
    }
}

#[test]
fn schemas_use_only_what_the_api_server_takes() {
    // A structural CRD schema may not use these (the API server refuses the whole CRD, so every
    // install fails): found once as `patternProperties` from a map keyed by a patterned type.
    const FORBIDDEN: [&str; 5] = [
        "patternProperties",
        "dependencies",
        "$ref",
        "definitions",
        "additionalItems",
    ];
    fn walk(path: &str, v: &serde_json::Value, found: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, sub) in map {
                    // Property names are data, not keywords.
                    if path.ends_with(".properties") {
                        walk(&format!("{path}.{k}"), sub, found);
                        continue;
                    }
                    if FORBIDDEN.contains(&k.as_str()) {
                        found.push(format!("{path}.{k}"));
                    }
                    walk(&format!("{path}.{k}"), sub, found);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, sub) in items.iter().enumerate() {
                    walk(&format!("{path}[{i}]"), sub, found);
                }
            }
            _ => {}
        }
    }
    for crd in [Router::crd(), Manager::crd()] {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
        let mut found = vec![];
        walk("", &schema, &mut found);
        assert!(found.is_empty(), "{}: {found:?}", crd.spec.names.kind);
    }
}

#[test]
fn quickstart_passes_every_cel_rule() {
    let q = quickstart();
    assert_eq!((q.routers.len(), q.managers.len()), (1, 1));
    assert_eq!(cel_errors(&q.routers[0]), "");
    assert_eq!(cel_errors(&q.managers[0]), "");
}

#[test]
fn min_above_max_is_rejected_naming_both() {
    let m = manager(serde_json::json!({"spec": {"scaling": {"minReplicas": 5, "maxReplicas": 2}}}));
    let err = cel_errors(&m);
    assert!(
        err.contains("minReplicas must not exceed maxReplicas"),
        "{err}"
    );
}

#[test]
fn enabled_scaling_needs_a_target_per_event_type() {
    let m = manager(
        serde_json::json!({"spec": {"scaling": {"enabled": true, "targets": {"echo": null}}}}),
    );
    let err = cel_errors(&m);
    assert!(
        err.contains("needs a target in spec.scaling.targets"),
        "{err}"
    );
    let off = manager(
        serde_json::json!({"spec": {"scaling": {"enabled": false, "targets": {"echo": null}}}}),
    );
    assert_eq!(cel_errors(&off), "");
}

#[test]
fn enabled_scaling_needs_a_target_per_subscription_keyed_as_written() {
    let subs = serde_json::json!([{"event": "orders.*"}, {"event": "users.created"}]);
    let scaled = |targets: serde_json::Value| {
        manager(serde_json::json!({"spec": {
            "subscriptions": subs,
            "scaling": {"enabled": true, "targets": targets},
        }}))
    };
    let err = cel_errors(&scaled(serde_json::json!({
        "noop": {"targetInFlight": 4},
        "orders.*": {"targetRate": 50.0},
    })));
    assert!(err.contains("every subscription needs a target"), "{err}");
    let all = serde_json::json!({
        "noop": {"targetInFlight": 4},
        "orders.*": {"targetRate": 50.0}, "users.created": {"targetInFlight": 8},
    });
    assert_eq!(cel_errors(&scaled(all.clone())), "");
    // Off: no target asked for, and a subscription's target is still a known key.
    let off = manager(serde_json::json!({"spec": {
        "subscriptions": subs,
        "scaling": {"enabled": false, "targets": all},
    }}));
    assert_eq!(cel_errors(&off), "");
}

#[test]
fn a_target_sets_exactly_one_measure() {
    let m = manager(
        serde_json::json!({"spec": {"scaling": {"targets": {"noop": {"targetRate": 5.0}}}}}),
    );
    assert!(
        cel_errors(&m).contains("exactly one of targetInFlight or targetRate"),
        "{}",
        cel_errors(&m)
    );
}

#[test]
fn dead_letter_may_not_loop_back() {
    let m = manager(serde_json::json!({"spec": {"workers": {"deadLetter": "noop"}}}));
    assert!(cel_errors(&m).contains("would loop"), "{}", cel_errors(&m));
}

#[test]
fn a_duplicate_window_is_taken_between_one_second_and_one_hour() {
    for ok in ["1s", "5s", "30s", "1h"] {
        let m = manager(serde_json::json!({"spec": {"durable": {"duplicateWindow": ok}}}));
        assert_eq!(cel_errors(&m), "", "{ok}");
    }
    for bad in ["0s", "500ms", "61m", "2h"] {
        let m = manager(serde_json::json!({"spec": {"durable": {"duplicateWindow": bad}}}));
        assert!(
            cel_errors(&m).contains("durable.duplicateWindow must be between 1s and 1h"),
            "{bad}: {}",
            cel_errors(&m)
        );
    }
    // Left out, it is the default and is not written back (older readers see no new field).
    let m = manager(serde_json::json!({}));
    assert_eq!(m.spec.durable.duplicate_window_ms(), None);
    let json = serde_json::to_value(&m.spec).expect("serializes");
    assert!(json.get("durable").is_none(), "{json}");
    let m = manager(serde_json::json!({"spec": {"durable": {"duplicateWindow": "5s"}}}));
    assert_eq!(m.spec.durable.duplicate_window_ms(), Some(5_000));
}

#[test]
fn a_streams_max_bytes_is_taken_between_32_mib_and_1_tib() {
    use switchyard_crds::manager::{MAX_STREAM_BYTES, MIN_STREAM_BYTES};
    for ok in [MIN_STREAM_BYTES, 1 << 30, MAX_STREAM_BYTES] {
        let m = manager(serde_json::json!({"spec": {"durable": {"maxBytes": ok}}}));
        assert_eq!(cel_errors(&m), "", "{ok}");
        assert_eq!(m.spec.durable.max_bytes(), u64::try_from(ok).ok());
        // A byte limit alone leaves the window the default, which travels as none.
        assert_eq!(m.spec.durable.duplicate_window_ms(), None, "{ok}");
    }
    // Below two events of the largest size (one 16 MiB event could fill it for good), or above 1 TiB.
    for bad in [1, 1 << 20, MIN_STREAM_BYTES - 1, MAX_STREAM_BYTES + 1] {
        let m = manager(serde_json::json!({"spec": {"durable": {"maxBytes": bad}}}));
        let errors = cel_errors(&m);
        assert!(
            errors.contains("durable.maxBytes must be between 33554432 (32 MiB")
                && errors.contains("1099511627776 (1 TiB)"),
            "{bad}: {errors}"
        );
    }
    // The schema's own bounds are the rule's, so a client that skips CEL is refused alike.
    let crd = serde_json::to_value(Manager::crd()).expect("json");
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["durable"]["properties"]["maxBytes"];
    assert_eq!(
        field["minimum"].as_f64(),
        Some(MIN_STREAM_BYTES as f64),
        "{field}"
    );
    assert_eq!(
        field["maximum"].as_f64(),
        Some(MAX_STREAM_BYTES as f64),
        "{field}"
    );
    // Left out: no byte limit, and nothing written back.
    let m = manager(serde_json::json!({}));
    assert_eq!(m.spec.durable.max_bytes(), None);
}

#[test]
fn grpc_and_http_ports_must_differ() {
    let r = router(serde_json::json!({"spec": {"listeners": {"grpc": {"port": 8080}}}}));
    assert!(cel_errors(&r).contains("must differ"), "{}", cel_errors(&r));
}

#[test]
fn connection_limits_are_checked_by_cel() {
    let ok = router(serde_json::json!({"spec": {"listeners": {"connections": {
        "firstByteTimeout": "250ms", "idleTimeout": "0s", "maxConnections": 100, "maxConnectionsPerClient": 100,
    }}}}));
    assert_eq!(cel_errors(&ok), "");
    let zero = router(
        serde_json::json!({"spec": {"listeners": {"connections": {"firstByteTimeout": "0s"}}}}),
    );
    assert!(
        cel_errors(&zero).contains("firstByteTimeout must be longer than 0s"),
        "{}",
        cel_errors(&zero)
    );
    let over = router(serde_json::json!({"spec": {"listeners": {"connections": {
        "maxConnections": 10, "maxConnectionsPerClient": 11,
    }}}}));
    assert!(
        cel_errors(&over).contains("maxConnectionsPerClient must not exceed maxConnections"),
        "{}",
        cel_errors(&over)
    );
}

#[test]
fn a_route_has_exactly_one_kind() {
    let mut r = router(serde_json::json!({}));
    r.spec.routes[0].websocket = Some(switchyard_crds::router::WebSocketRoute {
        command: "x".into(),
    });
    assert!(
        cel_errors(&r).contains("exactly one of http, websocket or grpc"),
        "{}",
        cel_errors(&r)
    );
}

#[test]
fn websocket_routes_need_the_websocket_listener() {
    let r = router(serde_json::json!({"spec": {"listeners": {"websocket": null}}}));
    assert!(
        cel_errors(&r).contains("needs listeners.websocket"),
        "{}",
        cel_errors(&r)
    );
}

#[test]
fn yaml_errors_name_the_document_and_field() {
    let text = "apiVersion: switchyard.dev/v1alpha1\nkind: Manager\nmetadata: {name: m}\nspec:\n  routerRef: {name: r}\n  events: [a]\n  template: {spec: {containers: []}}\n  replicas: lots\n";
    let err = yaml::parse(text).expect_err("bad replicas").to_string();
    assert!(
        err.contains("Manager m") && err.contains("replicas"),
        "{err}"
    );
}

#[test]
fn subscribe_rules_with_scopes_or_claims_need_jwt_auth() {
    let rules = serde_json::json!([
        {"events": ["prices.*"], "scopes": ["prices:read"]},
        {"events": ["*"]},
    ]);
    let r = router(serde_json::json!({"spec": {"listeners": {"websocket": {"subscribe": rules}}}}));
    let err = cel_errors(&r);
    assert!(
        err.contains("a subscribe rule with scopes or claims needs an auth middleware with jwt"),
        "{err}"
    );
    let jwt = serde_json::json!({"auth": {"jwt": {"algorithm": "HS256",
        "keySecretRef": {"name": "jwt", "key": "hmac"}}}});
    let r = router(serde_json::json!({"spec": {
        "listeners": {"websocket": {"subscribe": rules}},
        "middleware": [jwt],
    }}));
    assert_eq!(cel_errors(&r), "");
    // OIDC auth checks JWTs too.
    let oidc = serde_json::json!({"auth": {"oidc": {"issuer": "https://id.example.com",
        "audiences": ["api"]}}});
    let r = router(serde_json::json!({"spec": {
        "listeners": {"websocket": {"subscribe": rules}},
        "middleware": [oidc],
    }}));
    assert_eq!(cel_errors(&r), "");
    // Rules that ask nothing of the token need no JWT: they only open or close event types.
    let open = serde_json::json!([{"events": ["news"]}, {"events": ["public.*"], "claims": {}}]);
    let r = router(serde_json::json!({"spec": {"listeners": {"websocket": {"subscribe": open}}}}));
    assert_eq!(cel_errors(&r), "");
}

#[test]
fn oidc_auth_needs_an_https_issuer_and_is_the_only_auth_kind_of_its_entry() {
    let oidc = |issuer: &str| {
        serde_json::json!({"oidc": {"issuer": issuer, "audiences": ["api"],
            "algorithms": ["ES256", "EdDSA"], "leeway": "10s"}})
    };
    let with = |auth: serde_json::Value| {
        router(serde_json::json!({"spec": {"middleware": [{"auth": auth}]}}))
    };
    assert_eq!(
        cel_errors(&with(oidc("https://id.example.com/realms/a"))),
        ""
    );
    let err = cel_errors(&with(oidc("http://id.example.com")));
    assert!(err.contains("issuer must be an https:// URL"), "{err}");
    let mut both = oidc("https://id.example.com");
    both["apiKey"] = serde_json::json!({"keysSecretRef": {"name": "k", "key": "keys"}});
    let err = cel_errors(&with(both));
    assert!(
        err.contains("auth sets exactly one of jwt, oidc or apiKey"),
        "{err}"
    );
    // HS256 and `none` are not OIDC algorithms: the spec does not parse.
    for alg in ["HS256", "none"] {
        let mut spec = serde_json::to_value(&quickstart().routers[0]).expect("serializes");
        spec["spec"]["middleware"] = serde_json::json!([{"auth": {"oidc": {
            "issuer": "https://id.example.com", "audiences": ["api"], "algorithms": [alg]}}}]);
        let err = serde_json::from_value::<Router>(spec)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown variant"), "{alg}: {err}");
    }
}

#[test]
fn body_limit_goes_up_to_64_gib_for_streamed_bodies() {
    let limit =
        |n: i64| serde_json::json!({"spec": {"middleware": [{"bodyLimit": {"maxBytes": n}}]}});
    // Far above one frame (16 MiB): a streamed body holds a window, not its size.
    assert_eq!(cel_errors(&router(limit(1 << 30))), "");
    assert_eq!(cel_errors(&router(limit(64 << 30))), "");
    let err = cel_errors(&router(limit((64 << 30) + 1)));
    assert!(
        err.contains("bodyLimit.maxBytes is at most 64 GiB (68719476736)"),
        "{err}"
    );
}

#[test]
fn jwt_leeway_is_at_most_five_minutes() {
    let jwt = |leeway: &str| {
        serde_json::json!({"spec": {"middleware": [{"auth": {"jwt": {"algorithm": "HS256",
            "keySecretRef": {"name": "jwt", "key": "hmac"}, "leeway": leeway}}}]}})
    };
    assert!(
        cel_errors(&router(jwt("6m"))).contains("leeway is at most 5m"),
        "{}",
        cel_errors(&router(jwt("6m")))
    );
    assert_eq!(cel_errors(&router(jwt("5m"))), "");
    assert_eq!(cel_errors(&router(jwt("0s"))), "");
    // Absent, it is 30s.
    let r = router(
        serde_json::json!({"spec": {"middleware": [{"auth": {"jwt": {"algorithm": "HS256",
        "keySecretRef": {"name": "jwt", "key": "hmac"}}}}]}}),
    );
    let jwt = r.spec.middleware[0]
        .auth
        .as_ref()
        .and_then(|a| a.jwt.as_ref());
    assert_eq!(
        jwt.map(|j| std::time::Duration::from(j.leeway)),
        Some(switchyard_crds::router::DEFAULT_JWT_LEEWAY)
    );
}

#[test]
fn subscribe_event_pattern_takes_names_prefixes_and_star() {
    let re =
        regex::Regex::new(switchyard_crds::router::SUBSCRIBE_EVENTS_PATTERN).expect("compiles");
    for ok in ["*", "prices", "prices.tick", "prices.*", "a.b-c.d_e.*"] {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in [
        "",
        "prices*",
        "*.tick",
        "Prices",
        "prices.",
        "prices.*.x",
        "**",
    ] {
        assert!(!re.is_match(bad), "{bad}");
    }
}

fn subscribed(subs: serde_json::Value) -> Manager {
    manager(serde_json::json!({"spec": {"subscriptions": subs}}))
}

#[test]
fn subscriptions_with_patterns_observers_and_filters_pass() {
    let m = subscribed(serde_json::json!([
        {"event": "orders.created"},
        {"event": "orders.*", "observe": ["requests", "responses"],
         "filter": {"any": [{"exact": {"source": "/shop/web"}}, {"not": {"prefix": {"region": "us"}}}]}},
        {"event": "audit.entry", "delivery": "durable", "startFrom": "10m"},
        {"event": "billing.*", "delivery": "durable", "startFrom": "stored"},
    ]));
    assert_eq!(cel_errors(&m), "");
}

#[test]
fn a_replay_on_a_direct_subscription_is_refused_naming_start_from() {
    let m = subscribed(serde_json::json!([{"event": "orders.created", "startFrom": "stored"}]));
    let err = cel_errors(&m);
    assert!(err.contains("startFrom replays stored events"), "{err}");
    assert!(err.contains("startFrom"), "{err}");
}

#[test]
fn an_empty_or_doubled_filter_is_refused() {
    for f in [
        serde_json::json!({}),
        serde_json::json!({"exact": {"type": "a"}, "suffix": {"type": "b"}}),
        serde_json::json!({"all": [{"not": {}}]}),
    ] {
        let m = subscribed(serde_json::json!([{"event": "orders.created", "filter": f}]));
        let err = cel_errors(&m);
        assert!(
            err.contains("a filter sets exactly one of exact, prefix, suffix, all, any or not"),
            "{f}: {err}"
        );
    }
}

#[test]
fn filter_attribute_names_are_cloudevents_names() {
    let m = subscribed(serde_json::json!([
        {"event": "orders.created", "filter": {"exact": {"Region": "eu"}}}
    ]));
    let err = cel_errors(&m);
    assert!(err.contains("CloudEvents attribute names"), "{err}");
}

#[test]
fn the_subscriptions_schema_keys_them_by_event_and_nests_filters_three_deep() {
    let crd = serde_json::to_value(Manager::crd()).expect("crd");
    let subs = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["subscriptions"];
    assert_eq!(subs["x-kubernetes-list-type"], "map");
    assert_eq!(subs["x-kubernetes-list-map-keys"][0], "event");
    let filter = &subs["items"]["properties"]["filter"];
    let deepest =
        &filter["properties"]["not"]["properties"]["all"]["items"]["properties"]["any"]["items"];
    assert!(deepest["properties"]["exact"].is_object(), "{deepest}");
    assert!(deepest["properties"].get("not").is_none(), "{deepest}");
    let observe = &subs["items"]["properties"]["observe"];
    assert_eq!(observe["x-kubernetes-list-type"], "set");
}

#[test]
fn service_fields_are_checked_by_cel() {
    let node_port = router(serde_json::json!({"spec": {"service": {
        "type": "NodePort", "externalTrafficPolicy": "Local", "nodePorts": {"http": 30080},
        "annotations": {"example.com/lb": "internal"},
    }}}));
    assert_eq!(cel_errors(&node_port), "");
    let lb = router(serde_json::json!({"spec": {"service": {
        "type": "LoadBalancer", "loadBalancerClass": "example.com/lb", "nodePorts": {"http": 30080},
    }}}));
    assert_eq!(cel_errors(&lb), "");
    for (service, want) in [
        (
            serde_json::json!({"nodePorts": {"http": 30080}}),
            "nodePorts needs type NodePort or LoadBalancer",
        ),
        (
            serde_json::json!({"type": "ClusterIP", "externalTrafficPolicy": "Local"}),
            "externalTrafficPolicy needs type NodePort or LoadBalancer",
        ),
        (
            serde_json::json!({"type": "NodePort", "loadBalancerClass": "example.com/lb"}),
            "loadBalancerClass needs type LoadBalancer",
        ),
        (
            serde_json::json!({"type": "NodePort", "nodePorts": {"http": 30080, "grpc": 30080}}),
            "nodePorts.grpc must differ from nodePorts.http",
        ),
        // The quickstart's Router has a gRPC listener; without it a gRPC node port has nothing to serve.
        (
            serde_json::json!({"type": "NodePort", "nodePorts": {"grpc": 30090}}),
            "service.nodePorts.grpc needs listeners.grpc",
        ),
    ] {
        let mut r = router(serde_json::json!({"spec": {"service": service}}));
        if want.contains("listeners.grpc") {
            r.spec.listeners.grpc = None;
            r.spec.routes.retain(|route| route.grpc.is_none());
        }
        let errors = cel_errors(&r);
        assert!(errors.contains(want), "want {want:?}, got {errors}");
    }
}

#[test]
fn service_node_ports_are_bounded_by_the_schema() {
    let r = router(serde_json::json!({"spec": {"service": {
        "type": "NodePort", "nodePorts": {"http": 70000},
    }}}));
    let problems = switchyard_crds::strict::check(
        switchyard_crds::strict::Kind::Router,
        &serde_json::to_value(&r).expect("json"),
    );
    assert!(
        problems
            .iter()
            .any(|p| p.path == "spec.service.nodePorts.http"),
        "{problems:?}"
    );
    let typo = serde_json::json!({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "Router", "metadata": {"name": "r"},
        "spec": serde_json::to_value(&router(serde_json::json!({})).spec).map(|mut s| {
            s["service"] = serde_json::json!({"type": "NodePort", "nodePort": {"http": 30080}});
            s
        }).expect("json"),
    });
    let problems = switchyard_crds::strict::check(switchyard_crds::strict::Kind::Router, &typo);
    assert!(
        problems
            .iter()
            .any(|p| p.path.starts_with("spec.service.nodePort") && p.message.contains("nodePorts")),
        "{problems:?}"
    );
}
