//! The `deploy/` Dockerfiles and `deploy/build-images` describe the same images: for each image the
//! Dockerfile's cargo package, the path it copies the binary to, its USER, ENTRYPOINT and EXPOSE
//! equal what the built image (read back with `skopeo inspect --config`) has. CI has no container
//! engine, so the Dockerfiles are never built here; this keeps them from drifting.

use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeSet;
use switchyard_e2e::Cmd;
use switchyard_e2e::images::images;

/// What a Dockerfile says about its final image.
#[derive(Debug, Default)]
struct Described {
    package: String,
    binary_path: String,
    user: String,
    entrypoint: Vec<String>,
    ports: BTreeSet<String>,
}

fn describe(text: &str) -> Result<Described> {
    let mut d = Described::default();
    let mut final_stage = false;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("FROM ") {
            final_stage = !rest.contains(" AS ");
        }
        if let Some(i) = line.find("cargo build") {
            let words: Vec<&str> = line[i..].split_whitespace().collect();
            if let Some(p) = words.windows(2).find(|w| w[0] == "-p").map(|w| w[1]) {
                d.package = p.to_string();
            }
        }
        if !final_stage {
            continue;
        }
        if let Some(rest) = line.strip_prefix("COPY --from=build ") {
            d.binary_path = rest
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_string();
        } else if let Some(rest) = line.strip_prefix("USER ") {
            d.user = rest.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("ENTRYPOINT ") {
            d.entrypoint = serde_json::from_str(rest).context("ENTRYPOINT is not a JSON list")?;
        } else if let Some(rest) = line.strip_prefix("EXPOSE ") {
            d.ports = rest
                .split_whitespace()
                .map(|p| format!("{p}/tcp"))
                .collect();
        }
    }
    Ok(d)
}

#[tokio::test]
async fn dockerfiles_describe_the_images_build_images_makes() -> Result<()> {
    let images = images().await?;
    let deploy = switchyard_e2e::repo_root().join("deploy");
    for (dockerfile, name) in [
        ("operator.Dockerfile", "switchyard-operator"),
        ("sidecar.Dockerfile", "switchyard-sidecar"),
        ("example-app.Dockerfile", "switchyard-example-app"),
    ] {
        let path = deploy.join(dockerfile);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let d = describe(&text).with_context(|| format!("parsing {}", path.display()))?;
        let archive = images.dir.join(format!("{name}.tar"));
        let out = Cmd::new("skopeo")
            .args(["inspect", "--config"])
            .arg(format!("docker-archive:{}", archive.display()))
            .ok()
            .await?;
        let config: serde_json::Value =
            serde_json::from_str(&out.stdout).context("skopeo output")?;
        let c = &config["config"];
        let entrypoint: Vec<String> =
            serde_json::from_value(c["Entrypoint"].clone()).unwrap_or_default();
        let ports: BTreeSet<String> = c["ExposedPorts"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        ensure!(
            d.package == name,
            "{dockerfile} builds package {:?}, the image is {name}",
            d.package
        );
        ensure!(
            d.binary_path == format!("/usr/local/bin/{name}"),
            "{dockerfile} copies the binary to {:?}, build-images to /usr/local/bin/{name}",
            d.binary_path
        );
        ensure!(
            c["User"] == d.user.as_str(),
            "{dockerfile}: USER {:?}, image {}",
            d.user,
            c["User"]
        );
        ensure!(
            entrypoint == d.entrypoint,
            "{dockerfile}: ENTRYPOINT {:?}, image {entrypoint:?}",
            d.entrypoint
        );
        ensure!(
            ports == d.ports,
            "{dockerfile}: EXPOSE {:?}, image {ports:?}",
            d.ports
        );
        if d.user.starts_with('0') || d.user == "root" {
            bail!("{dockerfile} runs as root");
        }
    }
    Ok(())
}
