# syntax=docker/dockerfile:1
# The sidecar image (router and manager roles in one binary), non-root on distroless.
#   docker build -f deploy/sidecar.Dockerfile -t ghcr.io/switchyard-dev/switchyard-sidecar:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p switchyard-sidecar \
 && cp target/release/switchyard-sidecar /switchyard-sidecar

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /switchyard-sidecar /usr/local/bin/switchyard-sidecar
USER 65532:65532
EXPOSE 8080 50051 7070 9901
ENTRYPOINT ["/usr/local/bin/switchyard-sidecar"]
