package main

import "errors"

// Profile is the interchange form of schema "user-profile" and its v2 stored
// form, in the canonical payload's member order.
type Profile struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Email  string `json:"email"`
	Locale string `json:"locale"`
}

// defaultLocale is the locale of a profile stored before v2 had one.
const defaultLocale = "en"

// readProfile reads the v2 form, every member required. same reports that b
// is already the canonical payload.
func readProfile(b []byte) (p Profile, same bool, err error) {
	same, err = readCanonical(b,
		member{name: "id", read: readString(&p.ID)},
		member{name: "name", read: readString(&p.Name)},
		member{name: "email", read: readString(&p.Email)},
		member{name: "locale", read: readString(&p.Locale)},
	)
	if err != nil {
		return Profile{}, false, err
	}
	return p, same, p.valid()
}

// readProfileV1 reads the v1 stored form (full_name, no locale) and upgrades
// it to v2 with the default locale (so it is never the v2 payload). A v1
// payload without a name is refused, not upgraded to an empty name.
func readProfileV1(b []byte) (Profile, bool, error) {
	var p Profile
	err := readObject(b,
		member{name: "id", read: readString(&p.ID)},
		member{name: "full_name", read: readString(&p.Name)},
		member{name: "email", read: readString(&p.Email)},
	)
	if err != nil {
		return Profile{}, false, err
	}
	p.Locale = defaultLocale
	return p, false, p.valid()
}

func (p *Profile) valid() error {
	if p.ID == "" || p.Name == "" || p.Email == "" || p.Locale == "" {
		return errors.New("id, name, email and locale are required")
	}
	return nil
}
