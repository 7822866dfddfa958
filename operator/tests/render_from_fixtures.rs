//! The pure build and validate steps, driven from YAML fixtures: what a user applies in, the exact
//! children (or the exact field errors) out.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use switchyard_crds::router::HttpMethod;
use switchyard_crds::{Manager, Router, yaml};
use switchyard_operator::render::{self, RenderSettings, meta};
use switchyard_operator::validate;
use switchyard_operator::validate::template::TemplatePolicy;
use switchyard_protocol::config::{ManagerConfig, RouterConfig};

const SIDECAR: &str = "registry.example/switchyard-sidecar:test";

fn settings() -> RenderSettings {
    RenderSettings {
        sidecar_image: SIDECAR.into(),
        control_plane_url: None,
        mesh: None,
        jetstream: None,
    }
}

fn quickstart() -> (Router, Manager) {
    let mut objs =
        yaml::parse(include_str!("../../examples/quickstart.yaml")).expect("quickstart parses");
    let mut r = objs.routers.remove(0);
    let mut m = objs.managers.remove(0);
    for (meta, uid) in [
        (&mut r.metadata, "uid-router"),
        (&mut m.metadata, "uid-manager"),
    ] {
        meta.namespace = Some("demo".into());
        meta.uid = Some(uid.into());
    }
    (r, m)
}

fn fixture(text: &str) -> yaml::Objects {
    yaml::parse(text).expect("fixture parses")
}

fn pod(d: &Deployment) -> &PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

#[test]
fn router_children_are_owned_labelled_and_wired_to_the_config() {
    let (router, manager) = quickstart();
    let c = render::router::build(&router, std::slice::from_ref(&manager), &settings())
        .expect("builds");

    for meta in [
        &c.deployment.metadata,
        &c.service.metadata,
        &c.config_map.metadata,
    ] {
        let owner = &meta.owner_references.as_ref().expect("owner refs")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Router", "edge", "uid-router")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            meta.labels.as_ref().expect("labels")[meta::MANAGED_BY],
            "switchyard-operator"
        );
        assert_eq!(meta.namespace.as_deref(), Some("demo"));
    }
    assert_eq!(c.deployment.metadata.name.as_deref(), Some("edge-router"));
    assert_eq!(
        c.config_map.metadata.name.as_deref(),
        Some("edge-router-config")
    );

    let spec = c.deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(1));
    let container = &pod(&c.deployment).containers[0];
    assert_eq!(container.image.as_deref(), Some(SIDECAR));
    assert_eq!(container.args.as_deref().expect("args")[0], "router");
    let ports: Vec<_> = container
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect();
    assert_eq!(
        ports,
        [
            ("http".into(), 8080),
            ("grpc".into(), 50051),
            ("admin".into(), 9901),
            ("probes".into(), 9902)
        ]
    );
    // The kubelet probes a port of their own, never the admin port.
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.port, IntOrString::String("probes".into()));
    }
    // A router serves on for 5 s once it is terminating (the kubelet's preStop sleep), while its
    // pod leaves the endpoints, then drains on SIGTERM: the drain limit and its own stop.
    let sleep = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.sleep.as_ref())
        .expect("a preStop sleep on the router sidecar");
    assert_eq!(sleep.seconds, 5);
    assert_eq!(
        pod(&c.deployment).termination_grace_period_seconds,
        Some(50)
    );

    let svc_ports: Vec<_> = c
        .service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports");
    assert_eq!(
        svc_ports.iter().map(|p| p.port).collect::<Vec<_>>(),
        [8080, 50051]
    );

    let rendered: RouterConfig =
        serde_json::from_str(&c.config_map.data.as_ref().expect("data")["config.json"])
            .expect("config parses");
    assert_eq!(rendered.spec, router.spec);
    let noop = &rendered.destinations[&"noop".into()];
    assert_eq!(
        (noop.manager.as_str(), noop.service.as_str(), noop.port),
        ("handlers", "handlers-manager", 7070)
    );
    assert!(rendered.destinations.contains_key(&"echo".into()));

    let hash = &spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .expect("annotations")[meta::CONFIG_HASH];
    assert_eq!(
        hash,
        &meta::hash(&serde_json::to_string(&router.spec).expect("spec"))
    );
    // A new Manager changes the routing table but must not roll the router pods.
    let alone = render::router::build(&router, &[], &settings()).expect("builds");
    assert_ne!(alone.config_map, c.config_map);
    assert_eq!(alone.deployment, c.deployment);
}

#[test]
fn a_router_service_change_renders_the_service_only() {
    let (router, manager) = quickstart();
    let before = render::router::build(&router, std::slice::from_ref(&manager), &settings())
        .expect("builds");
    let mut exposed = router.clone();
    exposed.spec.service = serde_json::from_value(serde_json::json!({
        "type": "NodePort", "externalTrafficPolicy": "Local", "nodePorts": {"http": 30080},
    }))
    .expect("service");
    let after = render::router::build(&exposed, std::slice::from_ref(&manager), &settings())
        .expect("builds");
    let spec = after.service.spec.as_ref().expect("service spec");
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
    let http = spec
        .ports
        .as_ref()
        .expect("ports")
        .iter()
        .find(|p| p.name.as_deref() == Some("http"));
    assert_eq!(http.and_then(|p| p.node_port), Some(30080));
    // Only the operator reads `service`: the pods do not roll and the sidecar's config is unchanged.
    assert_eq!(after.deployment, before.deployment);
    assert_eq!(after.config_map, before.config_map);
}

#[test]
fn building_twice_gives_identical_objects() {
    let (router, manager) = quickstart();
    let a = render::router::build(&router, std::slice::from_ref(&manager), &settings()).expect("a");
    let b = render::router::build(&router, std::slice::from_ref(&manager), &settings()).expect("b");
    assert_eq!(
        a, b,
        "a reconcile with nothing changed must apply the same bytes"
    );
    assert_eq!(
        render::manager::build(&manager, Some(&router), &settings()).expect("a"),
        render::manager::build(&manager, Some(&router), &settings()).expect("b")
    );
}

#[test]
fn manager_gets_a_native_sidecar_and_keeps_the_users_template() {
    let (router, manager) = quickstart();
    let c = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    assert_eq!(c.deployments.len(), 1);
    let d = &c.deployments[0];
    assert_eq!(d.metadata.name.as_deref(), Some("handlers-manager"));
    let p = pod(d);
    let init = p.init_containers.as_ref().expect("init containers");
    assert_eq!(init[0].name, "switchyard-sidecar");
    assert_eq!(
        init[0].restart_policy.as_deref(),
        Some("Always"),
        "native sidecar"
    );
    assert_eq!(init[0].args.as_deref().expect("args")[0], "manager");
    let env: Vec<_> = init[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e.value.clone()))
        .collect();
    assert!(
        env.contains(&("SWITCHYARD_EVENT_TYPES", Some("noop,echo".into()))),
        "{env:?}"
    );
    // The stop: the sidecar drains from its own preStop hook (on loopback), the app's waits for
    // that drain to be over.
    let pre_stop = |c: &k8s_openapi::api::core::v1::Container| {
        c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone())
    };
    assert_eq!(
        pre_stop(&init[0])
            .and_then(|h| h.exec)
            .and_then(|e| e.command)
            .expect("sidecar exec preStop"),
        vec!["/usr/local/bin/switchyard-sidecar", "drain"]
    );
    assert!(
        env.contains(&("SWITCHYARD_SIGNAL_WAIT", Some("67s".into()))),
        "{env:?}"
    );
    let wait = pre_stop(&p.containers[0])
        .and_then(|h| h.http_get)
        .expect("app httpGet preStop");
    assert_eq!(
        (wait.path.as_deref(), wait.port),
        (Some("/drained"), IntOrString::Int(9901))
    );
    assert_eq!(p.termination_grace_period_seconds, Some(52));
    assert_eq!(p.containers[0].name, "app");
    assert!(
        p.containers[0]
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "SWITCHYARD_LOCAL_API")
    );
    assert!(
        p.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "switchyard-config")
    );

    let cfg: ManagerConfig =
        serde_json::from_str(&c.config_map.data.as_ref().expect("data")["config.json"])
            .expect("config parses");
    assert_eq!(cfg.router, "edge");
    assert_eq!(cfg.workers.max_in_flight, 64);
    assert_eq!(cfg.app.path, "/events");
}

#[test]
fn a_managers_push_list_reaches_its_sidecars_config() {
    let (router, mut manager) = quickstart();
    manager.spec.push = vec!["orders.shipped".into()];
    let c = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    let cfg: ManagerConfig =
        serde_json::from_str(&c.config_map.data.as_ref().expect("data")["config.json"])
            .expect("config parses");
    assert_eq!(cfg.push, manager.spec.push);
}

#[test]
fn a_managers_sidecar_resources_reach_its_sidecar_container() {
    let (router, mut manager) = quickstart();
    let sidecar = |m: &Manager| {
        let c = render::manager::build(m, Some(&router), &settings()).expect("builds");
        let p = pod(&c.deployments[0]).clone();
        p.init_containers.expect("init containers")[0]
            .resources
            .clone()
            .expect("resources")
    };
    // Absent: the operator's defaults, a memory limit among them.
    let defaults = sidecar(&manager);
    assert!(
        defaults
            .limits
            .as_ref()
            .is_some_and(|l| l.contains_key("memory")),
        "{defaults:?}"
    );
    manager.spec.sidecar.resources = serde_json::from_value(serde_json::json!({
        "requests": {"cpu": "250m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }))
    .expect("resources");
    let set = sidecar(&manager);
    assert_eq!(Some(set.clone()), manager.spec.sidecar.resources, "{set:?}");
    // The app's containers keep the template's own.
    let c = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    assert_eq!(
        pod(&c.deployments[0]).containers[0].resources,
        manager
            .spec
            .template
            .spec
            .as_ref()
            .expect("template")
            .containers[0]
            .resources
    );
}

#[test]
fn per_event_type_split_builds_one_deployment_per_type() {
    let mut m = fixture(include_str!("fixtures/per-event-type.yaml"))
        .managers
        .remove(0);
    m.metadata.namespace = Some("shop".into());
    let c = render::manager::build(&m, None, &settings()).expect("builds");
    let names: Vec<_> = c
        .deployments
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    assert_eq!(names, ["orders-orders-create", "orders-orders-get"]);
    for (d, event) in c.deployments.iter().zip(["orders-create", "orders-get"]) {
        let spec = d.spec.as_ref().expect("spec");
        assert_eq!(spec.replicas, Some(2));
        let sel = spec.selector.match_labels.as_ref().expect("selector");
        assert_eq!(sel[meta::EVENT_TYPE], event);
        let tpl_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .expect("labels");
        assert_eq!(tpl_labels["tier"], "backend", "user labels are kept");
        assert_eq!(tpl_labels[meta::EVENT_TYPE], event);
        let init = pod(d).init_containers.as_ref().expect("init");
        assert_eq!(
            init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["switchyard-sidecar", "migrate"]
        );
    }
    // The Service spans every pod of the Manager; routers pick per-type pods by label.
    let svc_sel = c
        .service
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .expect("selector");
    assert!(!svc_sel.contains_key(meta::EVENT_TYPE));
}

#[test]
fn per_event_type_destinations_select_the_types_pods() {
    let (router, _) = quickstart();
    let mut m = fixture(include_str!("fixtures/per-event-type.yaml"))
        .managers
        .remove(0);
    m.metadata.namespace = Some("demo".into());
    let cfg = render::router::render_config(&router, &[m]).expect("renders");
    let d = &cfg.destinations[&"orders.create".into()];
    assert_eq!(d.pod_selector[meta::EVENT_TYPE], "orders-create");
}

#[test]
fn managers_follow_their_routers_tracing() {
    let (mut router, manager) = quickstart();
    router.spec.tracing = Some(switchyard_crds::router::Tracing {
        otlp_endpoint: "http://otel-collector.observability:4317".into(),
        sampling_ratio: 0.1,
    });
    let config = |c: &render::manager::ManagerChildren| -> ManagerConfig {
        serde_json::from_str(&c.config_map.data.as_ref().expect("data")["config.json"])
            .expect("config parses")
    };
    let c = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    assert_eq!(config(&c).tracing, router.spec.tracing);
    // A missing Router (RouterNotFound) or one without tracing: none, and the config hash follows.
    let off = render::manager::build(&manager, None, &settings()).expect("builds");
    assert_eq!(config(&off).tracing, None);
    assert_ne!(c.config_map, off.config_map);
}

#[test]
fn quickstart_is_valid() {
    let (router, manager) = quickstart();
    assert_eq!(validate::router::validate("edge", &router.spec), []);
    assert_eq!(
        validate::manager::validate("handlers", &manager.spec, TemplatePolicy::Restricted),
        []
    );
}

#[test]
fn invalid_router_reports_every_field() {
    let r = fixture(include_str!("fixtures/invalid-router.yaml"))
        .routers
        .remove(0);
    let errors: Vec<String> = validate::router::validate("broken", &r.spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.routes[1].http: GET /orders/{orderId} is already routed by spec.routes[0]",
            "spec.routes[2].params.page: no {page} in path /orders",
            "spec.routes[4].websocket.command: command \"go\" is already routed by spec.routes[3]",
            "spec.routes[5].http.path: segment \"x{id}\": a parameter must be a whole segment such as {id}",
            "spec.middleware[1].bodyLimit: bodyLimit is already configured at spec.middleware[0]",
            "spec.broker.bodyBudgetBytes: 1048576 is less than one body of the largest size read whole (2097152 bytes: bodyLimit.maxBytes, at most 16 MiB): no such body could ever be read",
        ]
    );
}

#[test]
fn a_body_limit_above_the_budget_is_valid_since_streamed_bodies_hold_a_window() {
    let (mut router, _) = quickstart();
    router.spec.middleware = vec![
        serde_json::from_value(serde_json::json!({"bodyLimit": {"maxBytes": 1i64 << 30}}))
            .expect("middleware"),
    ];
    // 1 GiB of body, 256 MiB of budget (the default): streamed, it holds one window.
    assert_eq!(validate::router::validate("edge", &router.spec), []);
    // A body read whole still needs room for one: up to 16 MiB of it.
    router.spec.broker.body_budget_bytes = 1 << 20;
    let errors: Vec<String> = validate::router::validate("edge", &router.spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.broker.bodyBudgetBytes: 1048576 is less than one body of the largest size read whole (16777216 bytes: bodyLimit.maxBytes, at most 16 MiB): no such body could ever be read"
        ]
    );
}

#[test]
fn typed_query_parameters_of_get_and_delete_routes_are_valid() {
    // The router sidecar types a declared parameter that is not in the path as a query parameter
    // of GET and DELETE; the operator accepts what the sidecar serves.
    let r = fixture(include_str!("fixtures/invalid-router.yaml"))
        .routers
        .remove(0);
    let mut spec = r.spec.clone();
    spec.routes.truncate(1);
    spec.middleware.truncate(1);
    // The fixture's broker budget is too small for its body limit on purpose.
    spec.broker = Default::default();
    let mut list = r.spec.routes[2].clone();
    for method in [HttpMethod::Get, HttpMethod::Delete] {
        if let Some(h) = list.http.as_mut() {
            h.method = method;
        }
        spec.routes.push(list.clone());
        assert_eq!(validate::router::validate("ok", &spec), [], "{method:?}");
        spec.routes.pop();
    }
}

#[test]
fn invalid_manager_reports_reserved_names_and_ports() {
    let m = fixture(include_str!("fixtures/invalid-manager.yaml"))
        .managers
        .remove(0);
    let fields: Vec<String> =
        validate::manager::validate("clash", &m.spec, TemplatePolicy::Restricted)
            .into_iter()
            .map(|e| e.field)
            .collect();
    assert_eq!(
        fields,
        [
            "spec.app.port",
            "spec.template.spec.containers[0].name",
            "spec.template.spec.volumes[0].name",
            "spec.template.spec.volumes[1].name"
        ]
    );
}

#[test]
fn a_unix_app_transport_shares_one_socket_between_sidecar_and_app() {
    let (router, mut manager) = quickstart();
    let tcp = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    let p = pod(&tcp.deployments[0]);
    assert!(
        env_of(&p.containers[0], "SWITCHYARD_APP_SOCKET").is_none(),
        "TCP is the default and needs no socket"
    );
    assert!(
        !p.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "switchyard-app-socket")
    );

    manager.spec.app.transport = switchyard_crds::manager::AppTransport::Unix;
    let c = render::manager::build(&manager, Some(&router), &settings()).expect("builds");
    let p = pod(&c.deployments[0]);
    let side = &p.init_containers.as_ref().expect("init containers")[0];
    let app = &p.containers[0];
    for container in [side, app] {
        assert_eq!(
            env_of(container, "SWITCHYARD_APP_SOCKET").as_deref(),
            Some("/var/run/switchyard/app.sock"),
            "{}",
            container.name
        );
        assert!(
            container
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "switchyard-app-socket"
                    && m.mount_path == "/var/run/switchyard"
                    && m.read_only != Some(true)),
            "{}: {:?}",
            container.name,
            container.volume_mounts
        );
    }
    let volume = p
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "switchyard-app-socket")
        .expect("the socket's volume");
    assert!(volume.empty_dir.is_some(), "{volume:?}");
    let cfg: ManagerConfig =
        serde_json::from_str(&c.config_map.data.as_ref().expect("data")["config.json"])
            .expect("config parses");
    assert_eq!(
        cfg.app.transport,
        switchyard_crds::manager::AppTransport::Unix
    );
    // The pods roll when the transport changes: the sidecar's config says which it dials.
    assert_ne!(
        config_hash(&tcp.deployments[0]),
        config_hash(&c.deployments[0])
    );
}

#[test]
fn long_names_are_rejected_before_children_would_be() {
    let (router, _) = quickstart();
    let long = "r".repeat(48);
    let errors = validate::router::validate(&long, &router.spec);
    assert_eq!(errors[0].field, "metadata.name");
}

fn middleware_example() -> (Router, Manager) {
    let mut objs = fixture(include_str!("../../examples/middleware.yaml"));
    let mut r = objs.routers.remove(0);
    let m = objs.managers.remove(0);
    r.metadata.namespace = Some("demo".into());
    r.metadata.uid = Some("uid-router".into());
    (r, m)
}

fn config_hash(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .expect("annotations")[meta::CONFIG_HASH]
        .clone()
}

#[test]
fn referenced_secrets_are_mounted_read_only_and_roll_the_pods_when_renamed() {
    let (router, manager) = middleware_example();
    let c = render::router::build(&router, std::slice::from_ref(&manager), &settings())
        .expect("builds");
    let p = pod(&c.deployment);
    let volumes = p.volumes.as_ref().expect("volumes");
    let secret_volume = volumes
        .iter()
        .find(|v| v.secret.is_some())
        .expect("a Secret volume");
    assert_eq!(
        secret_volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("edge-api-keys")
    );
    let mounts = p.containers[0].volume_mounts.as_ref().expect("mounts");
    let mount = mounts
        .iter()
        .find(|m| m.name == secret_volume.name)
        .expect("the Secret is mounted");
    assert_eq!(
        mount.mount_path,
        format!("{}/edge-api-keys", switchyard_protocol::config::SECRETS_DIR)
    );
    assert_eq!(mount.read_only, Some(true));

    // A Router without middleware mounts no Secret.
    let (plain, manager) = quickstart();
    let q =
        render::router::build(&plain, std::slice::from_ref(&manager), &settings()).expect("builds");
    assert!(
        pod(&q.deployment)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.secret.is_none())
    );

    // Pointing at another Secret changes the config hash, so the pods roll and read the new keys.
    let mut renamed = router.clone();
    renamed.spec.middleware[2]
        .auth
        .as_mut()
        .and_then(|a| a.api_key.as_mut())
        .expect("apiKey entry")
        .keys_secret_ref
        .name = "edge-api-keys-v2".into();
    let r = render::router::build(&renamed, &[manager], &settings()).expect("builds");
    assert_ne!(config_hash(&r.deployment), config_hash(&c.deployment));
}

fn env_of(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

#[test]
fn sidecars_get_the_control_plane_url_only_when_configured() {
    let (router, manager) = quickstart();
    let url = "http://switchyard.switchyard-system.svc:7443";
    let with = RenderSettings {
        control_plane_url: Some(url.into()),
        ..settings()
    };
    for s in [&with, &settings()] {
        let r = render::router::build(&router, std::slice::from_ref(&manager), s).expect("router");
        let m = render::manager::build(&manager, Some(&router), s).expect("manager");
        let router_side = &pod(&r.deployment).containers[0];
        let manager_side = &pod(&m.deployments[0])
            .init_containers
            .as_ref()
            .expect("init")[0];
        for c in [router_side, manager_side] {
            assert_eq!(
                env_of(c, render::sidecar::CONTROL_PLANE_ENV),
                s.control_plane_url,
                "{}",
                c.name
            );
        }
    }
}

#[test]
fn per_event_type_deployments_take_the_autoscalers_replicas_of_their_type() {
    let mut m = fixture(include_str!("fixtures/per-event-type.yaml"))
        .managers
        .remove(0);
    m.metadata.namespace = Some("shop".into());
    m.status = Some(switchyard_crds::status::ManagerStatus {
        events: vec![switchyard_crds::status::EventTypeStatus {
            event: "orders.create".into(),
            desired_replicas: Some(5),
            ..Default::default()
        }],
        ..Default::default()
    });
    let replicas = |m: &Manager| -> Vec<Option<i32>> {
        render::manager::build(m, None, &settings())
            .expect("builds")
            .deployments
            .iter()
            .map(|d| d.spec.as_ref().and_then(|s| s.replicas))
            .collect()
    };
    // Scaling off: spec.replicas everywhere (kubectl scale or an HPA decide).
    assert_eq!(replicas(&m), [Some(2), Some(2)]);
    // Scaling on: the hot type's Deployment takes its recorded replicas, the other keeps spec's.
    m.spec.scaling.enabled = true;
    assert_eq!(replicas(&m), [Some(5), Some(2)]);
}

#[test]
fn each_workload_runs_as_its_own_service_account_which_it_owns() {
    let (router, manager) = quickstart();
    let r = render::router::build(&router, std::slice::from_ref(&manager), &settings())
        .expect("router");
    let m = render::manager::build(&manager, Some(&router), &settings()).expect("manager");
    let router_sa = r.service_account.metadata.name.clone().expect("name");
    let manager_sa = m.service_account.metadata.name.clone().expect("name");
    assert_eq!(
        (router_sa.as_str(), manager_sa.as_str()),
        ("edge-router", "handlers-manager")
    );
    assert_eq!(
        pod(&r.deployment).service_account_name.as_deref(),
        Some(router_sa.as_str())
    );
    for d in &m.deployments {
        assert_eq!(
            pod(d).service_account_name.as_deref(),
            Some(manager_sa.as_str())
        );
    }
    for (sa, uid) in [
        (&r.service_account, "uid-router"),
        (&m.service_account, "uid-manager"),
    ] {
        let owner = &sa.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!((owner.uid.as_str(), owner.controller), (uid, Some(true)));
        assert_eq!(sa.automount_service_account_token, Some(false));
        assert_eq!(sa.metadata.namespace.as_deref(), Some("demo"));
    }
}

#[test]
fn with_mesh_tls_every_sidecar_gets_a_projected_token_the_identity_url_and_the_trust_bundle() {
    let (router, manager) = quickstart();
    let url = "https://switchyard.switchyard-system.svc:7443";
    let mesh = RenderSettings {
        control_plane_url: Some(url.into()),
        mesh: Some(render::identity::MeshRender {
            identity_url: url.into(),
            trust_bundle: "-----BEGIN CERTIFICATE-----\n".into(),
        }),
        ..settings()
    };
    let r = render::router::build(&router, std::slice::from_ref(&manager), &mesh).expect("router");
    let m = render::manager::build(&manager, Some(&router), &mesh).expect("manager");
    let router_pod = pod(&r.deployment);
    let manager_pod = pod(&m.deployments[0]);
    let router_side = &router_pod.containers[0];
    let manager_side = &manager_pod.init_containers.as_ref().expect("init")[0];
    for (p, side, cm) in [
        (router_pod, router_side, &r.config_map),
        (manager_pod, manager_side, &m.config_map),
    ] {
        assert_eq!(
            p.automount_service_account_token,
            Some(false),
            "no default API token"
        );
        let token = p
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == render::identity::TOKEN_VOLUME)
            .and_then(|v| v.projected.as_ref())
            .and_then(|pr| pr.sources.as_ref())
            .and_then(|s| s[0].service_account_token.as_ref())
            .expect("the projected identity token");
        assert_eq!(token.audience.as_deref(), Some("switchyard-identity"));
        assert!(
            side.volume_mounts
                .iter()
                .flatten()
                .any(|vm| vm.name == render::identity::TOKEN_VOLUME && vm.read_only == Some(true))
        );
        assert_eq!(
            env_of(side, "SWITCHYARD_IDENTITY").as_deref(),
            Some(url),
            "{side:?}"
        );
        assert!(
            cm.data
                .as_ref()
                .is_some_and(|d| d.get("ca.crt").is_some_and(|c| c.contains("BEGIN"))),
            "the trust bundle next to the config"
        );
    }
    // Without mesh TLS none of it.
    let plain = render::router::build(&router, std::slice::from_ref(&manager), &settings())
        .expect("router");
    assert!(
        pod(&plain.deployment)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != render::identity::TOKEN_VOLUME)
    );
    assert!(
        plain
            .config_map
            .data
            .as_ref()
            .is_some_and(|d| !d.contains_key("ca.crt"))
    );
}

#[test]
fn a_rotated_trust_bundle_reaches_the_configmap_and_rolls_no_pod() {
    let (router, manager) = quickstart();
    let url = "https://switchyard.switchyard-system.svc:7443";
    let bundle = std::sync::Arc::new(std::sync::Mutex::new("OLD ROOT".to_owned()));
    let live = bundle.clone();
    let mesh = RenderSettings {
        control_plane_url: Some(url.into()),
        mesh: Some(render::identity::MeshRender {
            identity_url: url.into(),
            trust_bundle: render::identity::TrustBundle::live(move || {
                live.lock().expect("bundle").clone()
            }),
        }),
        ..settings()
    };
    let render = || {
        let r =
            render::router::build(&router, std::slice::from_ref(&manager), &mesh).expect("router");
        let m = render::manager::build(&manager, Some(&router), &mesh).expect("manager");
        let ca = |cm: &k8s_openapi::api::core::v1::ConfigMap| {
            cm.data.as_ref().expect("data")["ca.crt"].clone()
        };
        let hash = |d: &k8s_openapi::api::apps::v1::Deployment| {
            d.spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.clone())
                .expect("annotations")
        };
        (
            [ca(&r.config_map), ca(&m.config_map)],
            [hash(&r.deployment), hash(&m.deployments[0])],
        )
    };
    let (before, templates) = render();
    assert_eq!(before, ["OLD ROOT", "OLD ROOT"]);
    *bundle.lock().expect("bundle") = "OLD ROOT\nNEW ROOT".into();
    let (after, templates_after) = render();
    assert_eq!(after, ["OLD ROOT\nNEW ROOT", "OLD ROOT\nNEW ROOT"]);
    assert_eq!(
        templates, templates_after,
        "a new bundle changed a pod template"
    );
}

#[test]
fn every_manager_gets_the_jetstream_servers_and_durable_ones_need_them() {
    let (router, mut manager) = quickstart();
    let js = switchyard_protocol::durable::JetStreamConfig {
        url: "nats://nats.switchyard-system.svc:4222".into(),
        replicas: 3,
    };
    let with = RenderSettings {
        jetstream: Some(js.clone()),
        ..settings()
    };
    let config = |s: &RenderSettings, m: &Manager| -> Result<ManagerConfig, String> {
        let built = render::manager::build(m, Some(&router), s).map_err(|e| e.to_string())?;
        let data = built.config_map.data.expect("data");
        Ok(serde_json::from_str(&data[switchyard_protocol::config::FILE_NAME]).expect("config"))
    };
    // Direct delivery: the servers all the same, for its app's publishes to durable types of other
    // Managers (which the control plane's routes name); none when the operator has none.
    assert_eq!(
        config(&with, &manager).expect("renders").jetstream,
        Some(js.clone())
    );
    assert_eq!(
        config(&settings(), &manager).expect("renders").jetstream,
        None
    );
    manager.spec.delivery = switchyard_crds::manager::DeliveryMode::Durable;
    let c = config(&with, &manager).expect("renders");
    assert_eq!(c.jetstream, Some(js));
    assert!(!c.durable_events.is_empty());
    let e = config(&settings(), &manager).expect_err("durable without a server");
    assert!(
        e.contains("no JetStream server") && e.contains("jetstream.url"),
        "{e}"
    );
}
