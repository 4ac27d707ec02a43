package hcloudsim

import (
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// The catalog: locations, server types (with prices, as the API returns them: strings with ten
// decimals, per location) and images. Enough of Hetzner's real offer for stands; ids are Hetzner's.

type locationInfo struct {
	id                        int64
	name, desc, country, city string
	lat, long                 float64
	zone                      string
}

var locations = []locationInfo{
	{1, "fsn1", "Falkenstein DC Park 1", "DE", "Falkenstein", 50.47612, 12.370071, "eu-central"},
	{2, "nbg1", "Nuremberg DC Park 1", "DE", "Nuremberg", 49.452102, 11.076665, "eu-central"},
	{3, "hel1", "Helsinki DC Park 1", "FI", "Helsinki", 60.169855, 24.938379, "eu-central"},
	{4, "ash", "Ashburn, VA", "US", "Ashburn, VA", 39.045821, -77.487073, "us-east"},
	{5, "hil", "Hillsboro, OR", "US", "Hillsboro, OR", 45.54222, -122.95194, "us-west"},
	{6, "sin", "Singapore", "SG", "Singapore", 1.283333, 103.833333, "ap-southeast"},
}

func (l locationInfo) schema() schema.Location {
	return schema.Location{ID: l.id, Name: l.name, Description: l.desc, Country: l.country, City: l.city,
		Latitude: l.lat, Longitude: l.long, NetworkZone: l.zone}
}

type serverTypeInfo struct {
	id            int64
	name, desc    string
	cores         int
	memory        float32
	disk          int
	cpuType, arch string
	hourly        float64 // net EUR per hour
	monthly       float64 // net EUR per month
	euOnly        bool
}

var serverTypes = []serverTypeInfo{
	{22, "cpx11", "CPX 11", 2, 2, 40, "shared", "x86", 0.0080, 4.9900, false},
	{23, "cpx21", "CPX 21", 3, 4, 80, "shared", "x86", 0.0136, 8.4900, false},
	{24, "cpx31", "CPX 31", 4, 8, 160, "shared", "x86", 0.0248, 15.4900, false},
	{104, "cx22", "CX22", 2, 4, 40, "shared", "x86", 0.0060, 3.7900, true},
	{105, "cx32", "CX32", 4, 8, 80, "shared", "x86", 0.0104, 6.4900, true},
	{106, "cx42", "CX42", 8, 16, 160, "shared", "x86", 0.0256, 15.9900, true},
	{107, "cx52", "CX52", 16, 32, 320, "shared", "x86", 0.0512, 31.9900, true},
	{45, "cax11", "CAX11", 2, 4, 40, "shared", "arm", 0.0064, 3.9900, true},
	{96, "ccx13", "CCX13", 2, 8, 80, "dedicated", "x86", 0.0224, 13.9900, false},
}

// vat is the gross factor the prices carry (Germany's 19 %), as the API's gross fields do.
const vat = 1.19

func (t serverTypeInfo) schema() schema.ServerType {
	st := schema.ServerType{ID: t.id, Name: t.name, Description: t.desc, Category: category(t), Cores: t.cores,
		Memory: t.memory, Disk: t.disk, StorageType: "local", CPUType: t.cpuType, Architecture: t.arch}
	for _, l := range locations {
		if t.euOnly && l.zone != "eu-central" {
			continue
		}
		st.Prices = append(st.Prices, schema.PricingServerTypePrice{
			Location:          l.name,
			PriceHourly:       price(t.hourly),
			PriceMonthly:      price(t.monthly),
			IncludedTraffic:   21990232555520,
			PricePerTBTraffic: price(1),
		})
		st.Locations = append(st.Locations, schema.ServerTypeLocation{ID: l.id, Name: l.name, Available: true, Recommended: true})
	}
	return st
}

func category(t serverTypeInfo) string {
	if t.cpuType == "dedicated" {
		return "dedicated_cpu"
	}
	return "shared_cpu"
}

// price renders a net price and its gross as the API does ("3.7900000000").
func price(net float64) schema.Price {
	return schema.Price{Net: strconv.FormatFloat(net, 'f', 10, 64), Gross: strconv.FormatFloat(net*vat, 'f', 10, 64)}
}

func (t serverTypeInfo) availableIn(loc string) bool {
	for _, l := range locations {
		if l.name == loc {
			return !t.euOnly || l.zone == "eu-central"
		}
	}
	return false
}

type imageInfo struct {
	id                     int64
	name, desc, flavor, os string
	arch                   string
}

var images = []imageInfo{
	{114690387, "debian-12", "Debian 12", "debian", "12", "x86"},
	{114690389, "debian-12", "Debian 12", "debian", "12", "arm"},
	{310557660, "debian-13", "Debian 13", "debian", "13", "x86"},
	{161547269, "ubuntu-24.04", "Ubuntu 24.04", "ubuntu", "24.04", "x86"},
	{254587853, "rocky-10", "Rocky Linux 10", "rocky", "10", "x86"},
}

var imageCreated = time.Date(2023, 6, 13, 6, 0, 0, 0, time.UTC)

func (i imageInfo) schema() schema.Image {
	name, ver := i.name, i.os
	return schema.Image{ID: i.id, Status: "available", Type: "system", Name: &name, Description: i.desc,
		DiskSize: 5, Created: &imageCreated, OSFlavor: i.flavor, OSVersion: &ver, Architecture: i.arch,
		RapidDeploy: true, Labels: map[string]string{}}
}
