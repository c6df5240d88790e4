package main

import "fmt"

// SearchPage is the interchange and v1 stored form of schema "search-page":
// one page of product ids for a query, in the canonical payload's member
// order.
type SearchPage struct {
	Query string   `json:"query"`
	Page  int64    `json:"page"`
	IDs   []string `json:"ids"`
}

// The bounds match what region search-results keys by: a query of at most
// 256 bytes and a page below 10000.
const (
	maxSearchQuery = 256
	maxSearchPage  = 9999
	maxSearchIDs   = 100
	maxSearchID    = 64
)

// readSearchPage reads the v1 form. Every member is required; a page
// without results has "ids": []. same reports that b is already the
// canonical payload.
func readSearchPage(b []byte) (s SearchPage, same bool, err error) {
	same, err = readCanonical(b,
		member{name: "query", read: readString(&s.Query)},
		member{name: "page", read: readInt(&s.Page)},
		member{name: "ids", read: readStrings(&s.IDs, maxSearchIDs)},
	)
	if err != nil {
		return SearchPage{}, false, err
	}
	return s, same, s.valid()
}

func (s *SearchPage) valid() error {
	if s.Query == "" || len(s.Query) > maxSearchQuery {
		return fmt.Errorf("query must be 1-%d bytes", maxSearchQuery)
	}
	if s.Page < 1 || s.Page > maxSearchPage {
		return fmt.Errorf("page must be 1-%d", maxSearchPage)
	}
	for _, id := range s.IDs {
		if id == "" || len(id) > maxSearchID {
			return fmt.Errorf("ids must be 1-%d bytes each", maxSearchID)
		}
	}
	return nil
}
