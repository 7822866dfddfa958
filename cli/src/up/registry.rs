//! Where a running `switchyard up` leaves its sidecars' admin addresses for `switchyard top -f FILE`: one
//! JSON file per manifest in the temp directory, written once the plan is made and removed at exit.

use super::plan::{Plan, Probe, Tier};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One sidecar of a run: `router` or `manager`, its name (`edge`, `handlers[2]`) and admin address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sidecar {
    /// `router` or `manager`.
    pub role: &'static str,
    /// The Router's or Manager replica's name.
    pub name: String,
    /// Its admin server (`/metrics`).
    pub admin: SocketAddr,
}

/// The file for `manifest` (same for every spelling of its path).
pub fn path_for(manifest: &Path) -> PathBuf {
    let canonical = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_owned());
    // FNV-1a: stable across builds, unlike std's hasher, and plenty for naming a file.
    let hash = canonical
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    std::env::temp_dir()
        .join("switchyard-up")
        .join(format!("{hash:016x}.json"))
}

/// The sidecars of a plan, with their admin addresses (their readiness probe's).
pub fn sidecars(plan: &Plan) -> Vec<Sidecar> {
    plan.procs
        .iter()
        .filter_map(|p| {
            let (role, prefix) = match p.tier {
                Tier::Router => ("router", "router "),
                Tier::Manager => ("manager", "manager sidecar "),
                Tier::App | Tier::Store => return None,
            };
            let Probe::Http { addr, .. } = p.probe else {
                return None;
            };
            Some(Sidecar {
                role,
                name: p.label.strip_prefix(prefix).unwrap_or(&p.label).to_owned(),
                admin: addr,
            })
        })
        .collect()
}

/// The file's content.
pub fn render(manifest: &Path, sidecars: &[Sidecar]) -> String {
    let list: Vec<serde_json::Value> = sidecars
        .iter()
        .map(|s| serde_json::json!({"role": s.role, "name": s.name, "admin": s.admin.to_string()}))
        .collect();
    serde_json::json!({
        "manifest": manifest.display().to_string(),
        "pid": std::process::id(),
        "sidecars": list,
    })
    .to_string()
}

/// The sidecars of the `switchyard up -f manifest` running now (`tap -f`, `top -f`); the error
/// says none runs and how to go on.
pub fn running(manifest: &Path) -> anyhow::Result<Vec<Sidecar>> {
    let state = path_for(manifest);
    let text = std::fs::read_to_string(&state).map_err(|e| {
        anyhow::anyhow!(
            "{}: no running `switchyard up -f {}` found ({}: {e}); start one, or pass --addr",
            manifest.display(),
            manifest.display(),
            state.display()
        )
    })?;
    parse(&state, &text)
}

/// The sidecars a file lists; errors name the file and what is wrong.
pub fn parse(path: &Path, text: &str) -> anyhow::Result<Vec<Sidecar>> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("{}: not a switchyard up state file: {e}", path.display()))?;
    let list = v["sidecars"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("{}: no `sidecars` list", path.display()))?;
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let role = match s["role"].as_str() {
                Some("router") => "router",
                Some("manager") => "manager",
                other => anyhow::bail!("{}: sidecars[{i}].role {other:?}", path.display()),
            };
            let admin = s["admin"]
                .as_str()
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("{}: sidecars[{i}].admin", path.display()))?;
            Ok(Sidecar {
                role,
                name: s["name"].as_str().unwrap_or("").to_owned(),
                admin,
            })
        })
        .collect()
}

/// Removes the file when dropped.
pub struct Registration(PathBuf);

impl Registration {
    /// Writes the file for `manifest`.
    pub fn write(manifest: &Path, plan: &Plan) -> std::io::Result<Registration> {
        let path = path_for(manifest);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, render(manifest, &sidecars(plan)))?;
        Ok(Registration(path))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_bad_fields() -> anyhow::Result<()> {
        let s = vec![
            Sidecar {
                role: "router",
                name: "edge".into(),
                admin: "127.0.0.1:9901".parse()?,
            },
            Sidecar {
                role: "manager",
                name: "handlers[2]".into(),
                admin: "127.0.0.1:9902".parse()?,
            },
        ];
        let p = Path::new("/x/quickstart.yaml");
        assert_eq!(parse(p, &render(p, &s))?, s);
        let e = parse(p, r#"{"sidecars":[{"role":"app","admin":"1"}]}"#).expect_err("role");
        assert!(e.to_string().contains("sidecars[0].role"), "{e}");
        assert!(parse(p, "nope").is_err());
        assert_eq!(path_for(p), path_for(p));
        assert_ne!(path_for(p), path_for(Path::new("/x/other.yaml")));
        Ok(())
    }
}
