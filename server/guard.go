package server

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// guard refuses what a hostile web page can send to a server on this machine, before anything
// runs: a DNS-rebinding page reaches the loopback listener under its own name (Host:
// evil.example:8000), and any page can POST "simple" cross-origin requests (text/plain, no
// preflight) to 127.0.0.1. So the Host must name this server and a browser's Origin must be
// allowed; clients that send no Origin (curl, SDKs, IDEs, agents) pass the Origin check.
type guard struct {
	anyHost  bool
	hosts    map[string]bool // lower-case names and IPs
	suffixes []string        // ".example.com": it and its subdomains
	wildcard bool            // bound to 0.0.0.0 or ::: this machine's interface addresses name it too

	anyOrigin bool
	origins   map[string]bool // exact origins from --cors
	schemes   map[string]bool // every origin of these schemes ("scheme://*" in --cors, plus defaults)
}

// desktopSchemes are the origins of desktop apps' web views (editors, note apps, Tauri and
// Electron apps): a web page cannot have them, so they are allowed without --cors, as Ollama
// allows them.
var desktopSchemes = []string{"app", "file", "tauri", "vscode-webview", "vscode-file"}

func newGuard(bind string, allowedHosts, corsOrigins []string) *guard {
	g := &guard{hosts: map[string]bool{}, origins: map[string]bool{}, schemes: map[string]bool{}}
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		g.hosts[h] = true
	}
	if bind = canonicalHost(bind); bind != "" {
		g.hosts[bind] = true
	}
	if ip := net.ParseIP(bind); ip != nil && ip.IsUnspecified() {
		g.wildcard = true
		if name, err := os.Hostname(); err == nil { // with and without macOS's ".local"
			short := strings.TrimSuffix(canonicalHost(name), ".local")
			g.hosts[short], g.hosts[short+".local"] = true, true
		}
	}
	for _, h := range allowedHosts {
		switch h = canonicalHost(h); {
		case h == "*":
			g.anyHost = true
		case strings.HasPrefix(h, "."):
			g.suffixes = append(g.suffixes, h)
		case h != "":
			g.hosts[h] = true
		}
	}
	for _, s := range desktopSchemes {
		g.schemes[s] = true
	}
	for _, o := range corsOrigins {
		switch o = strings.ToLower(strings.TrimRight(strings.TrimSpace(o), "/")); {
		case o == "*":
			g.anyOrigin = true
		case strings.HasSuffix(o, "://*"):
			g.schemes[strings.TrimSuffix(o, "://*")] = true
		case o != "":
			g.origins[o] = true
		}
	}
	return g
}

// canonicalHost lower-cases a host name, strips an IPv6 literal's brackets and a trailing dot.
func canonicalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// hostOf is the host part of a Host header or URL authority (with or without a port).
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return canonicalHost(h)
	}
	return canonicalHost(hostport)
}

// hostAllowed reports whether a Host header names this server.
func (g *guard) hostAllowed(hostport string) bool {
	h := hostOf(hostport)
	switch {
	case hostport == "" || g.anyHost || g.hosts[h]:
		// No Host at all (HTTP/1.0) cannot come from a browser.
		return true
	case slices.ContainsFunc(g.suffixes, func(s string) bool { return h == s[1:] || strings.HasSuffix(h, s) }):
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || g.wildcard && isLocalAddress(ip))
}

// interfaceAddrs lists this machine's addresses (a variable for tests).
var interfaceAddrs = net.InterfaceAddrs

// isLocalAddress reports whether ip is one of this machine's interface addresses, read at the
// time of asking: they change as networks come and go.
func isLocalAddress(ip net.IP) bool {
	addrs, err := interfaceAddrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
}

// originAllowed reports whether a browser page at origin may call the server reached as host:
// --cors lists, pages served from this machine (loopback origins, or the server's own origin),
// and desktop web views.
func (g *guard) originAllowed(origin, host string) bool {
	o := strings.ToLower(origin)
	if g.anyOrigin || g.origins[o] {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || o == "null" {
		return false
	}
	if g.schemes[u.Scheme] {
		return true
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return false
	}
	h := canonicalHost(u.Hostname())
	if ip := net.ParseIP(h); h == "localhost" || ip != nil && ip.IsLoopback() {
		return true
	}
	return strings.EqualFold(u.Host, host) // same origin: a page this server itself served
}

// check is the middleware: 421 for a Host that does not name this server, 403 for a browser
// origin that is not allowed (any method, preflight or not), CORS headers for allowed ones.
func (g *guard) check(c *gin.Context) {
	r := c.Request
	if !g.hostAllowed(r.Host) {
		abortWith(c, &apiError{Status: http.StatusMisdirectedRequest, Type: "invalid_request_error", Code: strp("host_not_allowed"),
			Message: "Host " + r.Host + " does not name this server; if you reach it under that name, start lily serve with --allowed-hosts " + hostOf(r.Host)})
		return
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	if !g.originAllowed(origin, r.Host) {
		abortWith(c, &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: strp("origin_not_allowed"),
			Message: "browser origin " + origin + " is not allowed; to let pages from it use this server, start lily serve with --cors " + origin})
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Retry-After")
	if r.Method != http.MethodOptions {
		return
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req) // the origin is trusted: whatever its client sends
	} else {
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key")
	}
	if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
		h.Set("Access-Control-Allow-Private-Network", "true") // Chrome's private network access preflight
	}
	h.Set("Access-Control-Max-Age", "600")
	c.AbortWithStatus(http.StatusNoContent)
}
