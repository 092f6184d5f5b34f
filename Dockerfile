# Multi-stage build: a static cellserver binary in a minimal, non-root image.
#   docker build -t cellserver .
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t cellserver .
#   docker run -p 6379:6379 cellserver
#
# The Go image is pinned to an exact release. It sets GOTOOLCHAIN=local, so
# it must be at least go.mod's go line (1.26.0, what the dependencies
# require); a floating tag such as golang:1.26 could resolve to an older
# cached image.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Dependencies first, as a cached layer. go.mod replaces the client-side
# modules with their directories, so go mod download reads their go.mod.
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum ./client/
COPY gcra/go.mod ./gcra/
COPY limiter/go.mod ./limiter/
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/cellserver ./cmd/cellserver
# The state directory. The runtime image has no shell to create it, and only
# BuildKit makes a WORKDIR owned by the USER, so it is made here and copied
# with --chown: /data (and a named volume mounted there, which Docker seeds
# from the image) belongs to nonroot (65532) with either builder.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cellserver /usr/local/bin/cellserver
COPY --from=build --chown=65532:65532 /out/data /data
# State directory for persistence (mounted as a volume).
VOLUME /data
WORKDIR /data
EXPOSE 6379
USER nonroot:nonroot
# The binary checks itself: it reads the same CELLSERVER_* settings (the
# address too, on loopback when it is 0.0.0.0). With
# CELLSERVER_TLS_CA_CERT_FILE it presents CELLSERVER_TLS_CLIENT_CERT_FILE
# (else the server certificate, which must then allow client auth).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/cellserver", "--healthcheck"]
# Inside a container the server must listen on all interfaces; set a
# password (--requirepass) when the port is reachable by others.
ENTRYPOINT ["/usr/local/bin/cellserver"]
ENV CELLSERVER_ADDR=0.0.0.0:6379
