# Multi-stage build: a static cellserver binary in a minimal, non-root image.
#   docker build -t cellserver .
#   docker run -p 6379:6379 cellserver
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, as a cached layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/cellserver ./cmd/cellserver

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cellserver /usr/local/bin/cellserver
# State directory for persistence (mounted as a volume).
VOLUME /data
WORKDIR /data
EXPOSE 6379
USER nonroot:nonroot
# The binary checks itself: it reads the same CELLSERVER_* settings.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/cellserver", "--healthcheck", "--addr", "127.0.0.1:6379"]
# Inside a container the server must listen on all interfaces; set a
# password (--requirepass) when the port is reachable by others.
ENTRYPOINT ["/usr/local/bin/cellserver"]
ENV CELLSERVER_ADDR=0.0.0.0:6379
