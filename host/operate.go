package host

import (
	"context"
	"strings"

	"github.com/caphost/caphost/runtime/programs"
)

// ProgramInfo describes one catalog program for operators (no source).
type ProgramInfo struct {
	ID          string
	Function    string
	SHA1        string
	SHA256      string
	Keys        []string
	Args        []string
	Statuses    []string
	Clock       string
	RetrySafety string
	ACL         []string
}

// ProgramCatalog describes the embedded program set.
type ProgramCatalog struct {
	Set           string
	Version       int
	Library       string
	LibraryDigest string
	Programs      []ProgramInfo
}

// Programs describes the embedded catalog. It needs no Redis.
func Programs() (ProgramCatalog, error) {
	cat, err := programs.Load()
	if err != nil {
		return ProgramCatalog{}, err
	}
	set, version := cat.ProgramSet()
	lib, _, digest := cat.Library()
	pc := ProgramCatalog{Set: set, Version: version, Library: lib, LibraryDigest: digest}
	for _, p := range cat.Programs() {
		s := p.Spec()
		info := ProgramInfo{ID: s.ID, Function: s.Function, SHA1: s.SHA1, SHA256: s.SHA256,
			Clock: s.Clock, RetrySafety: s.RetrySafety, ACL: s.ACLCommands}
		for _, k := range s.Keys {
			info.Keys = append(info.Keys, k.Name)
		}
		for _, a := range s.Arguments {
			info.Args = append(info.Args, a.Name+":"+a.Type)
		}
		for _, st := range s.Statuses {
			info.Statuses = append(info.Statuses, st.Name)
		}
		pc.Programs = append(pc.Programs, info)
	}
	return pc, nil
}

// ProgramsNodeStatus is one primary's program state.
type ProgramsNodeStatus struct {
	Addr    string
	OK      bool
	Missing []string // evalsha-managed: programs not in the script cache
	Detail  string   // functions-provisioned: what differs
}

// ProgramsStatus is one deployment's program state.
type ProgramsStatus struct {
	Deployment string
	Mode       string
	OK         bool
	Nodes      []ProgramsNodeStatus
	Err        error
}

// VerifyPrograms checks the catalog on every primary of every selected
// deployment.
func (h *Host) VerifyPrograms(ctx context.Context) ([]ProgramsStatus, error) {
	if h.rt == nil {
		return nil, ErrNoRuntime
	}
	var out []ProgramsStatus
	for _, s := range h.rt.VerifyPrograms(ctx) {
		ps := ProgramsStatus{Deployment: s.Deployment, Mode: string(s.Report.Mode), OK: s.Err == nil, Err: s.Err}
		for _, n := range s.Report.Nodes {
			ns := ProgramsNodeStatus{Addr: n.Addr, Missing: n.MissingScripts}
			switch s.Report.Mode {
			case "functions-provisioned":
				ns.OK = n.LibraryPresent && n.LibraryCodeMatches && n.InfoMatches
				var why []string
				if !n.LibraryPresent {
					why = append(why, "library absent")
				} else {
					if !n.LibraryCodeMatches {
						why = append(why, "library code differs")
					}
					if !n.InfoMatches {
						why = append(why, "library info differs")
					}
				}
				ns.Detail = strings.Join(why, ", ")
			default:
				ns.OK = len(n.MissingScripts) == 0
			}
			ps.Nodes = append(ps.Nodes, ns)
		}
		out = append(out, ps)
	}
	return out, nil
}

// DeployPrograms provisions the catalog on every selected deployment (see
// runtime.Runtime.DeployPrograms).
func (h *Host) DeployPrograms(ctx context.Context) error {
	if h.rt == nil {
		return ErrNoRuntime
	}
	return h.rt.DeployPrograms(ctx)
}

// ProgramMode returns the configured program mode ("" without Redis).
func (h *Host) ProgramMode() string {
	if h.rt == nil {
		return ""
	}
	return string(h.rt.ProgramMode())
}
