package version

// Version is set at build time with -ldflags.
var Version = "0.0.0-dev"

// String returns the version for display.
func String() string {
	if Version == "" {
		return "unknown"
	}
	return "v" + Version
}