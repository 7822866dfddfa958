//! `deploy/release cli` (issue 39, item 1), the phase that packs the `switchyard` CLI for the GitHub
//! release, run as the release workflow runs it, twice, each time into a folder of the test's own. The
//! archive is read back with the real `gzip` and `tar`: exactly a top folder named as the archive with
//! `LICENSE`, `README.md` (the checkout's) and `switchyard` (the release binary), in name order, owned by
//! 0:0, every mtime the release time (`SOURCE_DATE_EPOCH`, else the commit time of HEAD), and a gzip
//! header with neither a name nor a time. The extracted binary prints the release version;
//! `sha256sum -c SHA256SUMS` passes in the release folder; the second run's archive is byte-identical.
//! No cluster. The release CLI is built with the images (deploy/build-images builds the same four
//! packages as the release's CLI phase), so after them this test builds nothing.
//!
//! The release version is the workspace's: the binary knows only the `Cargo.toml` version (clap's
//! `version`, from `CARGO_PKG_VERSION`), and the release workflow refuses a tag that differs from it.

use anyhow::{Context, Result, bail, ensure};
use std::path::Path;
use std::time::Duration;
use switchyard_e2e::release::VERSION;
use switchyard_e2e::{Cmd, repo_root, target_dir};

/// Tar's block: headers and file data are padded to it.
const BLOCK: usize = 512;

/// One member of the archive, from its ustar header.
#[derive(Debug)]
struct Entry {
    path: String,
    /// Type flag: `0` a regular file, `5` a folder.
    kind: u8,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    data: Vec<u8>,
}

/// A NUL-terminated header field as text.
fn text(field: &[u8]) -> Result<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).context("a tar header field is not UTF-8")
}

/// An octal number field (GNU tar writes small values in octal, padded with NUL or space).
fn octal(field: &[u8]) -> Result<u64> {
    let digits = text(field)?.trim_matches(|c| c == ' ' || c == '\0');
    u64::from_str_radix(digits, 8)
        .with_context(|| format!("tar header field {digits:?} is not octal"))
}

/// The members of an uncompressed tar archive, in archive order.
fn entries(tar: &[u8]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + BLOCK <= tar.len() {
        let header = &tar[at..at + BLOCK];
        if header.iter().all(|&b| b == 0) {
            return Ok(out); // the end-of-archive blocks
        }
        let kind = header[156];
        // A long name or a pax header would mean a layout the short release names never need.
        ensure!(
            matches!(kind, b'0' | b'5'),
            "tar member type {:?} at offset {at}: only files and folders expected",
            kind as char
        );
        let size = usize::try_from(octal(&header[124..136])?)?;
        let start = at + BLOCK;
        let data = tar
            .get(start..start + size)
            .with_context(|| format!("tar member at offset {at} runs past the archive's end"))?;
        out.push(Entry {
            path: text(&header[0..100])?.to_string(),
            kind,
            mode: u32::try_from(octal(&header[100..108])?)?,
            uid: octal(&header[108..116])?,
            gid: octal(&header[116..124])?,
            mtime: octal(&header[136..148])?,
            data: data.to_vec(),
        });
        at = start + size.div_ceil(BLOCK) * BLOCK;
    }
    bail!("the tar archive has no end-of-archive block")
}

/// The host target triple, as the script names the archive.
async fn host_triple() -> Result<String> {
    let out = Cmd::new("rustc").arg("-vV").ok().await?;
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("`rustc -vV` printed no host line")
}

/// The time the script stamps on every member: `SOURCE_DATE_EPOCH`, else HEAD's commit time.
async fn release_epoch() -> Result<u64> {
    let from_env = std::env::var("SOURCE_DATE_EPOCH").unwrap_or_default();
    let epoch = if from_env.is_empty() {
        let out = Cmd::new("git")
            .args(["log", "-1", "--format=%ct"])
            .ok()
            .await?;
        out.stdout.trim().to_string()
    } else {
        from_env
    };
    epoch
        .parse()
        .with_context(|| format!("release time {epoch:?} is not seconds since 1970"))
}

/// `VERSION=… SWITCHYARD_RELEASE_DIR=dir deploy/release cli`.
async fn release_cli(dir: &Path) -> Result<()> {
    Cmd::new(repo_root().join("deploy/release"))
        .arg("cli")
        .env("VERSION", VERSION)
        .env("SWITCHYARD_RELEASE_DIR", dir)
        // A cold release build of the CLI (and the operator and sidecar crates it links) on two cores.
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await
        .context("deploy/release cli")?;
    Ok(())
}

/// The file names in a folder, sorted.
fn listing(dir: &Path) -> Result<Vec<String>> {
    let mut names = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// The archive's gzip header: deflate, with neither a file name nor a time (`gzip -n`).
fn check_gzip_header(gz: &[u8]) -> Result<()> {
    ensure!(
        gz.len() > 10 && gz[..3] == [0x1f, 0x8b, 8],
        "not a gzip (deflate) file"
    );
    let flags = gz[3];
    ensure!(
        flags & 0x08 == 0,
        "the gzip header carries a file name (flags {flags:#04x})"
    );
    ensure!(
        gz[4..8] == [0; 4],
        "the gzip header carries a time: {:?}",
        &gz[4..8]
    );
    Ok(())
}

/// The members, in order, and every one's owner, time and content.
fn check_members(tar: &[u8], name: &str, epoch: u64) -> Result<()> {
    let members = entries(tar)?;
    let paths: Vec<&str> = members.iter().map(|e| e.path.as_str()).collect();
    let expected = [
        format!("{name}/"),
        format!("{name}/LICENSE"),
        format!("{name}/README.md"),
        format!("{name}/switchyard"),
    ];
    ensure!(
        paths == expected,
        "the archive holds {paths:?}, expected {expected:?}"
    );
    let repo = repo_root();
    let contents = [
        None,
        Some(read(&repo.join("LICENSE"))?),
        Some(read(&repo.join("README.md"))?),
        Some(read(&target_dir().join("release/switchyard"))?),
    ];
    for (member, content) in members.iter().zip(contents) {
        let path = &member.path;
        // Run as root the staged files are 0:0 anyway; this bites when a non-root user releases.
        ensure!(
            (member.uid, member.gid) == (0, 0),
            "{path} is owned by {}:{}, not 0:0",
            member.uid,
            member.gid
        );
        ensure!(
            member.mtime == epoch,
            "{path} has mtime {}, not the release time {epoch}",
            member.mtime
        );
        let kind = if content.is_some() { b'0' } else { b'5' };
        ensure!(
            member.kind == kind,
            "{path} has tar type {:?}",
            member.kind as char
        );
        if let Some(content) = content {
            ensure!(
                member.data == content,
                "{path} differs from the file it was packed from"
            );
        }
    }
    let binary = &members[3];
    ensure!(
        binary.mode & 0o111 == 0o111,
        "the binary's mode is {:o}, not executable",
        binary.mode
    );
    Ok(())
}

/// `gzip -dc ARCHIVE`: the tar stream.
fn gunzip(archive: &Path) -> Result<Vec<u8>> {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(archive)
        .output()
        .context("running gzip")?;
    ensure!(
        out.status.success(),
        "gzip -dc {} failed: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// `SHA256SUMS` lists the archive alone, and `sha256sum -c` agrees from the release folder.
async fn check_sums(dir: &Path, archive: &str) -> Result<()> {
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).context("reading SHA256SUMS")?;
    let lines: Vec<&str> = sums.lines().collect();
    let listed = match lines.as_slice() {
        [line] => line.split_once("  "),
        _ => None,
    };
    match listed {
        Some((digest, file))
            if file == archive
                && digest.len() == 64
                && digest.bytes().all(|b| b.is_ascii_hexdigit()) => {}
        _ => bail!("SHA256SUMS is not one line `<sha256>  {archive}`:\n{sums}"),
    }
    let check = Cmd::new("sha256sum")
        .args(["--strict", "-c", "SHA256SUMS"])
        .cwd(dir)
        .ok()
        .await?;
    ensure!(
        check.stdout.trim() == format!("{archive}: OK"),
        "sha256sum -c printed {:?}",
        check.stdout
    );
    Ok(())
}

/// Unpacks the archive with `tar` and runs the binary: it prints the release's version.
async fn check_binary_runs(archive: &Path, name: &str, scratch: &Path) -> Result<()> {
    std::fs::create_dir_all(scratch)?;
    Cmd::new("tar")
        .arg("-xzf")
        .arg(archive)
        .arg("-C")
        .arg(scratch)
        .ok()
        .await?;
    let out = Cmd::new(scratch.join(name).join("switchyard"))
        .arg("--version")
        .ok()
        .await?;
    ensure!(
        out.stdout.trim() == format!("switchyard {VERSION}"),
        "the released binary says {:?}, not version {VERSION}",
        out.stdout.trim()
    );
    Ok(())
}

#[tokio::test]
async fn the_cli_phase_packs_the_binary_license_and_readme_reproducibly() -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    let name = format!("switchyard-{VERSION}-{}", host_triple().await?);
    let archive = format!("{name}.tar.gz");

    release_cli(&first).await?;
    let left = listing(&first)?;
    ensure!(
        left == [".lock", "SHA256SUMS", archive.as_str()],
        "the release folder holds {left:?}, not just the archive and SHA256SUMS"
    );
    let gz = read(&first.join(&archive))?;
    check_gzip_header(&gz)?;
    check_members(
        &gunzip(&first.join(&archive))?,
        &name,
        release_epoch().await?,
    )?;
    check_sums(&first, &archive).await?;
    check_binary_runs(
        &first.join(&archive),
        &name,
        &scratch.path().join("unpacked"),
    )
    .await?;

    // Again into another folder (the binary is not rebuilt; every staged file gets a new mtime).
    release_cli(&second).await?;
    ensure!(
        read(&second.join(&archive))? == gz,
        "a second `deploy/release cli` made a different {archive}"
    );
    ensure!(
        read(&second.join("SHA256SUMS"))? == read(&first.join("SHA256SUMS"))?,
        "a second `deploy/release cli` wrote a different SHA256SUMS"
    );
    Ok(())
}
