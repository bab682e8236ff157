package model

// VersionCheck compares a traced process's installed server version with
// the versions the preset's rules were checked against (the preset's
// checked_against).
type VersionCheck struct {
	Distribution string   `json:"distribution"`
	Checked      []string `json:"checked_versions"`
	Status       string   `json:"status"`                      // checked, outside or unknown
	Installed    string   `json:"installed_version,omitempty"` // from METADATA's Version
	Metadata     string   `json:"metadata,omitempty"`          // the file read, as the target sees it
	// Problem says why the version is unknown, or what an outside
	// version means for the figures.
	Problem string `json:"problem,omitempty"`
}

// Version check statuses (VersionCheck.Status).
const (
	// VersionChecked: the installed version is one the rules were checked against.
	VersionChecked = "checked"
	// VersionOutside: the installed version is not among them.
	VersionOutside = "outside"
	// VersionUnknown: the installed version could not be found or read.
	VersionUnknown = "unknown"
)
