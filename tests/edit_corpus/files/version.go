package version

// Version is set at build time with -ldflags.
var Version = "dev"

// String returns the version for display.
func String() string {
	if Version == "" {
		return "unknown"
	}
	return "v" + Version
}