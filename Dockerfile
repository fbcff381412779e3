# envoy-rls: a static binary on a distroless base, run as a non-root user.
#   docker build -t envoy-rls .
#   docker run -p 8081:8081 -p 8080:8080 envoy-rls
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/envoy-rls ./cmd/envoy-rls \
 && /out/envoy-rls check-config config

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/envoy-rls /envoy-rls
# The default config; mount your own over /config, or point -config elsewhere.
COPY config /config
WORKDIR /
USER 65532:65532
# 8081: RLS v3 gRPC (and grpc.health.v1); 8080: /healthz, /readyz, /metrics, POST /json.
# The admin address (/config, profiles) listens on the container's loopback, 127.0.0.1:6070.
EXPOSE 8081 8080
# The image has no shell: the binary probes its own gRPC health.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/envoy-rls", "healthcheck"]
ENTRYPOINT ["/envoy-rls"]
CMD ["serve"]
