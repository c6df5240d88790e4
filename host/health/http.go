package health

import (
	"encoding/json"
	"net/http"
)

// LivezHandler answers 200 whenever the process can serve HTTP. It never
// touches Redis or guests.
func LivezHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(`{"status":"UP"}` + "\n"))
	})
}

// ReadyzHandler answers 200 with the report while ready (UP or DEGRADED) and
// 503 when a required role is DOWN.
func ReadyzHandler(c *Checker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := c.Readiness(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}
