module github.com/stands-engine/stands-reconciler

go 1.26

require (
	github.com/lmittmann/tint v1.2.1 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.28.0 // indirect
)
