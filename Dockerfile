# envoy-rls: a static binary on a distroless base, run as a non-root user.
#   docker build -t envoy-rls \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" --build-arg COMMIT="$(git rev-parse HEAD)" .
#   docker run -p 8081:8081 -p 8080:8080 envoy-rls
# The binary is both /bin/envoy-rls and /bin/ratelimit: run as ratelimit (the
# command envoyproxy/ratelimit's images have, which Envoy Gateway and
# Istio's sample run), it reads that service's environment variables.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git: the version and commit come as arguments.
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X main.buildVersion=${VERSION} -X main.buildCommit=${COMMIT}" \
      -o /out/envoy-rls ./cmd/envoy-rls \
 && /out/envoy-rls check-config config \
 && /out/envoy-rls version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/envoy-rls /bin/envoy-rls
COPY --from=build /out/envoy-rls /bin/ratelimit
# The default config; mount your own over /config, or point -config elsewhere.
COPY config /config
WORKDIR /
USER 65532:65532
# 8081: RLS v3 gRPC (and grpc.health.v1); 8080: /healthz, /readyz, /healthcheck, /metrics, POST /json.
# The admin address (/config, profiles) listens on the container's loopback, 127.0.0.1:6070.
EXPOSE 8081 8080
# The image has no shell: the binary probes its own gRPC health.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/bin/envoy-rls", "healthcheck"]
ENTRYPOINT ["/bin/envoy-rls"]
CMD ["serve"]
