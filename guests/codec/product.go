package main

import (
	"errors"
	"fmt"
	"strings"
)

// Product is the interchange form of schema "product" and its v2 stored
// form, in the canonical payload's member order.
type Product struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PriceCents int64    `json:"price_cents"`
	Currency   string   `json:"currency"`
	Tags       []string `json:"tags,omitempty"`
}

const (
	// maxPriceCents is the largest v1 price, 999999999999.99, so every v1
	// payload upgrades and v1 and v2 share one range (exact in a float64
	// too, for readers that parse JSON numbers as doubles).
	maxPriceCents = 99_999_999_999_999
	maxTags       = 16
)

// readProduct reads the v2 form. Tags are optional; [] and no tags are the
// same product and encode alike (without the member). same reports that b
// is already the canonical payload.
func readProduct(b []byte) (p Product, same bool, err error) {
	same, err = readCanonical(b,
		member{name: "id", read: readString(&p.ID)},
		member{name: "name", read: readString(&p.Name)},
		member{name: "price_cents", read: readInt(&p.PriceCents)},
		member{name: "currency", read: readString(&p.Currency)},
		member{name: "tags", optional: true, read: readStrings(&p.Tags, maxTags)},
	)
	if err != nil {
		return Product{}, false, err
	}
	if len(p.Tags) == 0 {
		p.Tags = nil // omitted: [] and no tags are one product
	}
	return p, same, p.valid()
}

func (p *Product) valid() error {
	switch {
	case p.ID == "" || p.Name == "":
		return errors.New("id and name must not be empty")
	case p.PriceCents < 0 || p.PriceCents > maxPriceCents:
		return fmt.Errorf("price_cents must be 0-%d", maxPriceCents)
	case !isCurrency(p.Currency):
		return errors.New("currency must be 3 upper-case letters")
	}
	return nil
}

// isCurrency reports whether s has the shape of an ISO 4217 code; which codes
// exist is the application's business, not the payload format's.
func isCurrency(s string) bool {
	return len(s) == 3 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

// readProductV1 reads the v1 stored form, whose price was a decimal string
// ("12.34"), and upgrades it to v2 (so it is never the v2 payload).
func readProductV1(b []byte) (Product, bool, error) {
	var p Product
	var price string
	err := readObject(b,
		member{name: "id", read: readString(&p.ID)},
		member{name: "name", read: readString(&p.Name)},
		member{name: "price", read: readString(&price)},
		member{name: "currency", read: readString(&p.Currency)},
	)
	if err != nil {
		return Product{}, false, err
	}
	if p.PriceCents, err = parseCents(price); err != nil {
		return Product{}, false, err
	}
	return p, false, p.valid()
}

// parseCents converts a v1 price, ^\d{1,12}(\.\d{1,2})?$, to integer cents
// digit by digit, exactly: through a float64, int64(0.29*100) is 28.
func parseCents(s string) (int64, error) {
	units, frac, dotted := strings.Cut(s, ".")
	if !digits(units, 12) || dotted && !digits(frac, 2) {
		return 0, errors.New("price must be a decimal of 1-12 digits and at most 2 decimals")
	}
	var cents int64
	for _, c := range units + (frac + "00")[:2] {
		cents = cents*10 + int64(c-'0')
	}
	return cents, nil
}

// digits reports whether s is 1 to max ASCII digits.
func digits(s string, max int) bool {
	return len(s) >= 1 && len(s) <= max && strings.Trim(s, "0123456789") == ""
}
