"""Request generation: arrivals, lengths, prefix sharing, conversations and traces in, request tables out."""
