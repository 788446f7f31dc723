#!/usr/bin/env python3
# The medians of scripts/bench-ab.sh runs as a Markdown table:
#   scripts/bench-ab-medians.py OUT name,name,...
import json,sys,statistics as st,collections
rows=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l)
    if 'scenario' not in r: continue
    rows[(r['scenario'],r['server'])].append(r)
order=sys.argv[2].split(',')
print("| scenario | server | CPU µs/req (median; runs) | p50 ms | p99 ms | RssAnon max MiB | RSS max MiB | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for sc in ['closed-max','closed-streams','streams-2000']:
    for sv in order:
        rs=rows.get((sc,sv),[])
        if not rs: continue
        c=[r['cpu_us_per_req'] for r in rs]
        print(f"| {sc} | {sv} | {st.median(c):.0f} ({', '.join(f'{x:.0f}' for x in c)}) | {st.median([r['p50_ms'] for r in rs]):.2f} | {st.median([r['p99_ms'] for r in rs]):.2f} | {st.median([r.get('rss_anon_max_kib',0) for r in rs])/1024:.0f} | {st.median([r['rss_max_kib'] for r in rs])/1024:.0f} | {sum(r.get('errors',0) for r in rs)} |")
