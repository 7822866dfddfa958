//! The container's memory limit, read from its cgroup: cgroup v2's `memory.max` or cgroup v1's
//! `memory/memory.limit_in_bytes`, of the process's own cgroup (`/proc/self/cgroup`) and every
//! ancestor under the mount (a parent's limit binds its children), the least of them. In a container
//! with its own cgroup namespace the own path is `/` and the mount's root is the container's cgroup;
//! without one, the host's path is looked up under the mount and, when it is not there, the mount's
//! root is the container's. "max", cgroup v1's huge number or no cgroup at all is no limit
//! (`switchyard_protocol::memory::effective_limit` turns that into the documented default).
//! Parsing is pure; [`memory_limit`] is the thin reading shell.

use std::path::{Path, PathBuf};

const PROC_CGROUP: &str = "/proc/self/cgroup";
const V2_ROOT: &str = "/sys/fs/cgroup";
const V2_FILE: &str = "memory.max";
const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V1_FILE: &str = "memory.limit_in_bytes";

/// The memory limit of this process's cgroup in bytes; `None`: no limit found.
pub(crate) fn memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string(PROC_CGROUP).unwrap_or_default();
    let (v2, v1) = own_paths(&own);
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let found = [
        v2.map(|rel| least(Path::new(V2_ROOT), &rel, V2_FILE, read)),
        v1.map(|rel| least(Path::new(V1_ROOT), &rel, V1_FILE, read)),
    ];
    found.into_iter().flatten().flatten().min()
}

/// The process's cgroup paths from `/proc/self/cgroup`: the v2 one (`0::/path`) and the v1 memory
/// controller's (`N:memory:/path`, or a line naming several controllers).
fn own_paths(text: &str) -> (Option<String>, Option<String>) {
    let mut v2 = None;
    let mut v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_owned());
        }
    }
    (v2, v1)
}

/// A limit file's content: bytes, or `None` for "max" or anything unreadable.
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The directories whose limit binds a process in `rel` under `root`: its own and every ancestor up
/// to the root. When `rel` is not under the root (a host path seen from a container without a cgroup
/// namespace), the root alone: there the mount's root is the container's cgroup.
fn chain(root: &Path, rel: &str, exists: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    let own = root.join(rel);
    if rel.is_empty() || !exists(&own) {
        return vec![root.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut at = Some(own.as_path());
    while let Some(dir) = at {
        out.push(dir.to_path_buf());
        if dir == root {
            break;
        }
        at = dir.parent();
    }
    out
}

/// The least limit over `rel`'s chain under `root`, read with `read`.
fn least(
    root: &Path,
    rel: &str,
    file: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    let exists = |p: &Path| read(&p.join(file)).is_some();
    chain(root, rel, exists)
        .iter()
        .filter_map(|dir| parse_limit(&read(&dir.join(file))?))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn own_paths_of_a_hybrid_host_and_a_v2_container() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            own_paths(hybrid),
            (Some("/".into()), Some("/process_api/abc".into()))
        );
        assert_eq!(own_paths("0::/\n"), (Some("/".into()), None));
        assert_eq!(
            own_paths("5:cpuacct,memory:/kubepods/pod1/c2\n"),
            (None, Some("/kubepods/pod1/c2".into()))
        );
        assert_eq!(own_paths("garbage"), (None, None));
    }

    #[test]
    fn max_is_no_limit_and_the_least_of_the_chain_binds() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("134217728\n"), Some(128 << 20));
        let files: HashMap<PathBuf, &str> = HashMap::from([
            (
                PathBuf::from("/m/memory.limit_in_bytes"),
                "9223372036854771712",
            ),
            (PathBuf::from("/m/a/memory.limit_in_bytes"), "268435456"),
            (
                PathBuf::from("/m/a/b/memory.limit_in_bytes"),
                "9223372036854771712",
            ),
        ]);
        let read = |p: &Path| files.get(p).map(|s| (*s).to_owned());
        // b has none of its own: its parent's 256 MiB binds it.
        assert_eq!(
            least(Path::new("/m"), "/a/b", "memory.limit_in_bytes", read),
            Some(256 << 20)
        );
        // A host path not under the mount: the mount's root is the container's cgroup.
        assert_eq!(
            least(
                Path::new("/m"),
                "/kubepods/x",
                "memory.limit_in_bytes",
                read
            ),
            Some(9_223_372_036_854_771_712)
        );
        assert_eq!(least(Path::new("/none"), "/", "memory.max", read), None);
    }
}
