module github.com/finalizer-guard/finalizer-guard/e2e/presets/complete

go 1.26.0
