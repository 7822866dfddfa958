# syntax=docker/dockerfile:1
# The operator image: built in a full Rust image, shipped on distroless as a non-root user.
#   docker build -f deploy/operator.Dockerfile -t ghcr.io/switchyard-dev/switchyard-operator:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p switchyard-operator \
 && cp target/release/switchyard-operator /switchyard-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /switchyard-operator /usr/local/bin/switchyard-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/switchyard-operator"]
