package httpjson

import (
	"net/http"
	"slices"
	"strings"
)

// Mount registers routes, keyed by net/http ServeMux patterns ("POST
// /v1/ratelimit/evaluate"), on mux. For every path that a pattern binds
// to methods it also registers the bare path, answering every other method
// with a JSON 405 and an Allow header (the mux's own 405 is text/plain).
// A pattern without a method is registered as it is. Each path must belong
// to one Mount call (the mux panics on a duplicate pattern); registration
// order is deterministic.
func Mount(mux *http.ServeMux, routes map[string]http.Handler) {
	patterns := make([]string, 0, len(routes))
	for p := range routes {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns)
	allow := map[string][]string{}
	var paths []string
	for _, p := range patterns {
		mux.Handle(p, routes[p])
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			continue
		}
		path = strings.TrimSpace(path)
		if _, seen := allow[path]; !seen {
			paths = append(paths, path)
		}
		allow[path] = append(allow[path], method)
	}
	for _, path := range paths {
		mux.Handle(path, MethodNotAllowed(allow[path]...))
	}
}

// MethodNotAllowed answers a JSON 405 naming the allowed methods.
func MethodNotAllowed(allowed ...string) http.Handler {
	list := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", list)
		WriteError(w, NewError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use "+list))
	})
}
