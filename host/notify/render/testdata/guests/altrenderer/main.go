// Command altrenderer is a test guest: another edition of the reference
// renderer's "welcome" v1 template (other wording, text channel only),
// swapped in to show that a frozen render result does not change with the
// module that rendered it.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "altrenderer", Renderer: &guest.Renderer{
		Templates: []abi.TemplateDecl{{ID: "welcome", Version: 1, Locales: []string{"en", "de"},
			Channels: []string{"text"}, Params: []string{"name", "account"}}},
		Render: func(req *abi.RenderRequest) ([]abi.MessagePart, error) {
			v := map[string]string{}
			for _, p := range req.Params {
				v[p.Name] = p.Value
			}
			body := "Hi " + v["name"] + ", account " + v["account"] + " is live.\n"
			if req.Locale == "de" {
				body = "Hallo " + v["name"] + ", Konto " + v["account"] + " ist aktiv.\n"
			}
			return []abi.MessagePart{{Name: "body", ContentType: "text/plain; charset=utf-8", Body: []byte(body)}}, nil
		},
	}})
}

func main() {}
