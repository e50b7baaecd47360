package guestnet

// PublishLimits is publishLimits, for the external tests of the held ports.
var PublishLimits = publishLimits
