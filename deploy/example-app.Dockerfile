# syntax=docker/dockerfile:1
# The quickstart's handler app.
#   docker build -f deploy/example-app.Dockerfile -t ghcr.io/switchyard-dev/switchyard-example-app:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p switchyard-example-app \
 && cp target/release/switchyard-example-app /switchyard-example-app

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /switchyard-example-app /usr/local/bin/switchyard-example-app
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/switchyard-example-app"]
