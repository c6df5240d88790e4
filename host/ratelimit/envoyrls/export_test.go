package envoyrls

// Exported for the external tests.
var (
	SelectorQuery = selectorQuery
	RequestID     = requestID
	WindowUnit    = windowUnit
)
