# wave: a static binary on an empty base image, holding only the binary and CA certificates.
# Runs as uid 65532 and writes nothing to disk, so it works with a read-only root filesystem.
#   docker build -t wave .
# The binary is glibc linked statically (crt-static), exactly what `make static` builds and tests.

FROM rust:1.95-bookworm AS build
# The image has no .git: `--build-arg WAVE_COMMIT=$(git rev-parse HEAD)` names the commit in
# `wave --version` and `wave_build_info` (build.rs).
ARG WAVE_COMMIT=unknown
ARG SOURCE_DATE_EPOCH
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin wave --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/wave /wave

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /wave /wave
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/wave"]
CMD ["run"]
