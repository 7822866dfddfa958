//! One verdict per file, whoever gives it: every example (`examples/*.yaml`, all accepted, and
//! `examples/accepted/*.yaml`, spellings YAML readers disagree on) and every
//! refused fixture (`examples/refused/*.yaml`, one per rule) goes through `switchyard check`, the API
//! server's side (the CRD's structural schema and its CEL rules), the operator's validation and the
//! sidecars' start checks on the configs rendered from it. The test fails when a layer's verdict is not
//! the one the fixture states, or when `check` accepts what any layer refuses (or refuses what all
//! accept). e2e/tests/cluster.rs (`check_and_the_api_server_agree_on_every_example_and_refused_fixture`)
//! holds the API server's half against a real one.

use crate::check;
use kube::ResourceExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use switchyard_crds::strict::{self, Kind};
use switchyard_crds::{Manager, Router};
use switchyard_operator::validate;
use switchyard_operator::validate::template::TemplatePolicy;

/// What a layer says of a file: `None` when it never sees the file (the objects are not even typed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Accepts,
    Refuses,
    Unseen,
}

impl Verdict {
    fn of(refused: bool) -> Self {
        if refused {
            Verdict::Refuses
        } else {
            Verdict::Accepts
        }
    }

    fn parse(word: &str) -> Self {
        match word {
            "accepts" => Verdict::Accepts,
            "refuses" => Verdict::Refuses,
            "-" => Verdict::Unseen,
            other => panic!("verdict {other:?}: accepts, refuses or -"),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Verdicts {
    api_server: Verdict,
    operator: Verdict,
    sidecar: Verdict,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    out.sort();
    out
}

/// `# expect KEY: VALUE` lines of a fixture.
fn expectation<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("# expect {key}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(str::trim)
}

/// `switchyard check`'s verdict and what it prints.
fn check_of(text: &str) -> (Verdict, String) {
    match switchyard_crds::yaml::parse(text) {
        Err(e) => (Verdict::Refuses, e.to_string()),
        Ok(objs) => {
            let problems = check::placed(&objs, text);
            (Verdict::of(!problems.is_empty()), problems.join("\n"))
        }
    }
}

/// Each layer's verdict, computed apart from `check`.
fn layers_of(text: &str) -> Verdicts {
    // What kubectl sends the API server for this text.
    let docs: Vec<Value> = switchyard_crds::yaml::documents(text).expect("YAML");
    let mut schema_refuses = false;
    let (mut routers, mut managers, mut untyped) = (Vec::new(), Vec::new(), false);
    for doc in docs.iter().filter(|d| !d.is_null()) {
        match doc["kind"].as_str() {
            Some("Router") => {
                schema_refuses |= !strict::check(Kind::Router, doc).is_empty();
                match serde_json::from_value::<Router>(doc.clone()) {
                    Ok(r) => {
                        schema_refuses |= kube::core::cel::validate_cel(&r).is_err();
                        routers.push(r);
                    }
                    Err(_) => untyped = true,
                }
            }
            Some("Manager") => {
                schema_refuses |= !strict::check(Kind::Manager, doc).is_empty();
                match serde_json::from_value::<Manager>(doc.clone()) {
                    Ok(m) => {
                        schema_refuses |= kube::core::cel::validate_cel(&m).is_err();
                        managers.push(m);
                    }
                    Err(_) => untyped = true,
                }
            }
            Some("Secret") => schema_refuses |= !strict::check(Kind::Secret, doc).is_empty(),
            _ => {}
        }
    }
    if untyped {
        return Verdicts {
            api_server: Verdict::of(schema_refuses),
            operator: Verdict::Unseen,
            sidecar: Verdict::Unseen,
        };
    }
    let operator = routers
        .iter()
        .any(|r| !validate::router::validate(&r.name_any(), &r.spec).is_empty())
        || managers.iter().any(|m| {
            !validate::manager::validate(&m.name_any(), &m.spec, TemplatePolicy::Restricted)
                .is_empty()
        });
    let sidecar = routers
        .iter()
        .any(|r| check::router_start_problem(r, &managers).is_some())
        || managers
            .iter()
            .any(|m| check::manager_start_problem(m, &routers).is_some());
    Verdicts {
        api_server: Verdict::of(schema_refuses),
        operator: Verdict::of(operator),
        sidecar: Verdict::of(sidecar),
    }
}

fn refused(v: &Verdicts) -> bool {
    [v.api_server, v.operator, v.sidecar].contains(&Verdict::Refuses)
}

#[test]
fn every_example_is_accepted_by_every_layer() {
    let mut files = yaml_files(&repo().join("examples"));
    assert!(files.len() >= 5, "examples: {files:?}");
    let accepted = yaml_files(&repo().join("examples/accepted"));
    assert!(!accepted.is_empty(), "examples/accepted is empty");
    files.extend(accepted);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let (verdict, said) = check_of(&text);
        assert_eq!(verdict, Verdict::Accepts, "{}: {said}", file.display());
        let layers = layers_of(&text);
        assert!(!refused(&layers), "{}: {layers:?}", file.display());
    }
}

#[test]
fn every_refused_fixture_gets_the_verdicts_it_states_and_check_refuses_it_first() {
    let files = yaml_files(&repo().join("examples/refused"));
    assert!(files.len() >= 5, "fixtures: {files:?}");
    for file in files {
        let name = file.display();
        let text = std::fs::read_to_string(&file).expect("read");
        let expect = |key| {
            expectation(&text, key).unwrap_or_else(|| panic!("{name}: no `# expect {key}:` line"))
        };
        let stated = Verdicts {
            api_server: Verdict::parse(expect("api-server")),
            operator: Verdict::parse(expect("operator")),
            sidecar: Verdict::parse(expect("sidecar")),
        };
        let layers = layers_of(&text);
        assert_eq!(layers, stated, "{name}");
        let (verdict, said) = check_of(&text);
        assert_eq!(verdict, Verdict::of(refused(&layers)), "{name}: {said}");
        assert!(said.contains(expect("check")), "{name}: {said}");
        // What the API server refuses names a field (e2e holds the API server to naming it too).
        if stated.api_server == Verdict::Refuses {
            assert!(said.contains(expect("field")), "{name}: {said}");
        }
    }
}
