// Package config owns caphost's configuration loading: one YAML file read
// through koanf, CAPHOST_ environment overrides, strict decoding (unknown
// keys fail), selective decoding (inactive capabilities, unselected roles
// and the deployments only they reference are never decoded), secret
// resolution, guest trust checks (every module and trusted key file is read
// and each sha256 pin and configured signature verified through
// plugins/trust), and validation through the pure rules in package policy.
// Every problem is reported at once as a *policy.ValidationError.
//
// Change here: the YAML shape, defaults and the env-override convention
// (keep docs/configuration.md in step). Validation rules themselves live in
// policy so the runtime and the CLI share them.
package config
