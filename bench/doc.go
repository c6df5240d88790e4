// Package bench holds side-by-side comparisons of caphost against plain
// go-redis and peer libraries. It is a separate module so that peers used
// only for comparison never become dependencies of caphost itself.
package bench
