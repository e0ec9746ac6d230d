import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=[r for r in rows[2:] if len(r)==len(hdr)]
ix={h:i for i,h in enumerate(hdr)}
def f(r,h):
    try: return float(r[ix[h]])
    except: return 0.0
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=collections.Counter()
for r in data:
    for h in stalls: tot[h]+=f(r,h)
S=sum(tot.values())
print("total samples",S, "instructions executed", sum(f(r,'Instructions Executed') for r in data))
for h,v in tot.most_common(12): print(f"  {h:28s} {v/S*100:5.1f}%")
# by opcode
op=collections.Counter(); opn=collections.Counter()
for r in data:
    o=r[ix['Source']].split()
    o=[x for x in o if not x.startswith('@')]
    name=o[0].split('.')[0] if o else '?'
    op[name]+=f(r,'Warp Stall Sampling (All Samples)'); opn[name]+=f(r,'Instructions Executed')
print("by opcode (samples %, executed)")
for k,v in op.most_common(16): print(f"  {k:10s} {v/S*100:5.1f}%  {opn[k]:.3g}")
