package envoyrls

// Exported for the external tests' fuzz targets.
var (
	SelectorQuery = selectorQuery
	RequestID     = requestID
)
