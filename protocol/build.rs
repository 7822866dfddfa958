//! Generates the gRPC APIs in `proto/switchyard/v1/` (the gateway, the app's Handler, the manager's
//! local API) and their file descriptor set (for server reflection), and the operator's control-plane
//! API (`control.proto`, and `identity.proto`: the certificates it issues) into its own folder, so
//! the gateway's reflection does not advertise a service the router does not serve. protoc comes
//! from `protoc-bin-vendored`; no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(&protoc);
    tonic_prost_build::configure()
        // The RPC `Connect` would clash with the generated `GatewayClient::connect(dst)`; clients use
        // `GatewayClient::new(channel)`.
        .build_transport(false)
        .file_descriptor_set_path(out.join("switchyard_v1_descriptor.bin"))
        .compile_with_config(
            config,
            &[
                "proto/switchyard/v1/gateway.proto",
                "proto/switchyard/v1/handler.proto",
                "proto/switchyard/v1/local_api.proto",
            ],
            &["proto"],
        )?;

    let control = out.join("control");
    std::fs::create_dir_all(&control)?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(&protoc);
    tonic_prost_build::configure()
        .out_dir(&control)
        .compile_with_config(
            config,
            &[
                "proto/switchyard/v1/control.proto",
                "proto/switchyard/v1/identity.proto",
            ],
            &["proto"],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
