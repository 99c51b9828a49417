package sink

// SetBulkJoined sets the hook b calls each time an event joins the batch
// being formed. Call it before the first handler call.
func SetBulkJoined(b *Bulk, joined func()) { b.joined = joined }

// SamePlacement is samePlacement: whether two indices make the same
// documents of the same (id, routing) pairs.
var SamePlacement = samePlacement
