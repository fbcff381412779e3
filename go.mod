module github.com/envoy-rls/envoy-rls

go 1.25.0
