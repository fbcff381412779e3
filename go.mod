module github.com/envoy-rls/envoy-rls

go 1.25.0

require gopkg.in/yaml.v3 v3.0.1 // indirect
