"""Independent ASN.1 reading of a receipt for Storekeeper's tests: asn1crypto parses the PKCS #7 envelope and
the payload, and prints the attributes and the device-hash check as JSON.

Usage: asn1_receipt.py RECEIPT.der DEVICE-UUID
"""
import hashlib
import json
import sys
import uuid

from asn1crypto import cms, core


class Attribute(core.Sequence):
    _fields = [("type", core.Integer), ("version", core.Integer), ("value", core.OctetString)]


class Payload(core.SetOf):
    _child_spec = Attribute


def attributes(data):
    return {}, [(int(a["type"].native), a["value"].native) for a in Payload.load(data)]


info = cms.ContentInfo.load(open(sys.argv[1], "rb").read())
payload = info["content"]["encap_content_info"]["content"].native
_, items = attributes(payload)
by_type = {}
purchases = []
for kind, value in items:
    if kind == 17:
        purchase = {}
        for inner_kind, inner_value in attributes(value)[1]:
            if inner_kind in (1702, 1703):
                purchase[str(inner_kind)] = core.UTF8String.load(inner_value).native
        purchases.append(purchase)
    else:
        by_type[kind] = value
device = uuid.UUID(sys.argv[2]).bytes
expected = hashlib.sha1(device + by_type[4] + by_type[2]).digest()
print(json.dumps({
    "receipt_type": core.UTF8String.load(by_type[0]).native,
    "bundle_id": core.UTF8String.load(by_type[2]).native,
    "version": core.UTF8String.load(by_type[3]).native,
    "device_hash_matches": expected == by_type[5],
    "purchases": purchases,
}))
