package main

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/mcp"
	"github.com/spf13/cobra"
)

// `mediajobs mcp`: the Model Context Protocol server of package mcp, over stdio
// or streamable HTTP (docs/mcp.md).

func mcpCmd(api *apiFlags) *cobra.Command {
	var addr string
	var trustedProxies []string
	maxSessions, maxSessionsPerKey := 1000, 16
	cmd := &cobra.Command{
		Use:   "mcp [-http ADDR]",
		Short: "serve the Model Context Protocol (stdio, or streamable HTTP on ADDR) as a client of the service",
		Long: `Serve the Model Context Protocol so that agents can run ffmpeg jobs: tools to
run a job (local files uploaded first), check one without running it, get, list,
wait for and cancel jobs, read a job's ffmpeg logs, and probe a media file.

Over stdio (the default; an MCP client starts this command) it talks to the
service at -url / MEDIAJOBS_URL with -api-key / MEDIAJOBS_API_KEY, and tools may
read local input files and save outputs locally. With -http ADDR it serves
streamable HTTP at http://ADDR/mcp instead: each session uses the API key of the
request that opened it (Authorization: Bearer), and tools take URLs only. It
sends each client's address to the service in X-Forwarded-For: list this host
in the gateway's server.trusted_proxies (docs/mcp.md).`,
		Example: `  claude mcp add mediajobs -e MEDIAJOBS_URL=http://127.0.0.1:8080 -e MEDIAJOBS_API_KEY=mj_... -- mediajobs mcp
  mediajobs mcp -http 127.0.0.1:8090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				c, err := api.client()
				if err != nil {
					return err
				}
				return mcp.ServeStdio(cmd.Context(), c)
			}
			var proxies []netip.Prefix
			for _, s := range trustedProxies {
				p, err := config.ParseProxy(s)
				if err != nil {
					return fmt.Errorf("-trusted-proxy %q is neither an address nor a range such as 10.0.0.0/8", s)
				}
				proxies = append(proxies, p)
			}
			base := api.baseURL()
			h, err := mcp.NewHTTP(mcp.Options{BaseURL: base, Clients: newMCPClients(proxies),
				MaxSessions: maxSessions, MaxSessionsPerKey: maxSessionsPerKey})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "MCP (streamable HTTP) at http://%s/mcp, for the service at %s\n", ln.Addr(), base)
			return h.Serve(cmd.Context(), ln)
		},
	}
	cmd.Flags().StringVar(&addr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8090) instead of stdio")
	cmd.Flags().StringSliceVar(&trustedProxies, "trusted-proxy", nil, "with -http: an address or range of a reverse proxy in front of this server (TLS); its X-Forwarded-For names the client (repeatable)")
	cmd.Flags().IntVar(&maxSessions, "max-sessions", maxSessions, "with -http: sessions open at once, in all")
	cmd.Flags().IntVar(&maxSessionsPerKey, "max-sessions-per-key", maxSessionsPerKey, "with -http: sessions open at once per API key")
	return cmd
}

// mcpClients finds an MCP client's address as the gateway does (through the
// -trusted-proxy proxies) and limits its failed keys before the service is
// asked: the service sees this host's junk as its clients' (X-Forwarded-For).
type mcpClients struct {
	proxies []netip.Prefix
	*gateway.AuthFailures
}

func newMCPClients(proxies []netip.Prefix) *mcpClients {
	return &mcpClients{proxies: proxies,
		AuthFailures: &gateway.AuthFailures{Rate: 1, Burst: 20, GlobalRate: 100, GlobalBurst: 1000}}
}

func (c *mcpClients) Addr(r *http.Request) netip.Addr {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return gateway.ClientAddr(ap.Addr(), r.Header.Values("X-Forwarded-For"), c.proxies)
}
