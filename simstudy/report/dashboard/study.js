// simstudy dashboard, study view: axis filters, sorting, comparison and scenario timeline.
function studyState(){const f={};document.querySelectorAll('select.axis').forEach(s=>{if(s.value!=='*')f[s.dataset.axis]=s.value;});return f;}
function studyRows(){const f=studyState();return STUDY.rows.filter(r=>Object.entries(f).every(([k,v])=>String(r[k])===v));}
function drawStudy(){const rows=studyRows();const m=document.getElementById('metric').value;
 document.querySelectorAll('#results tbody tr').forEach(tr=>{const r=STUDY.rows[+tr.dataset.i];
  tr.style.display=rows.includes(r)?'':'none';});
 const ok=rows.filter(r=>r.status==='ok');
 Plotly.react('comparison',[{type:'bar',x:ok.map(r=>r.__label),y:ok.map(r=>r[m]),name:m,
   hovertemplate:'%{x}<br>'+m+' = %{y}<extra></extra>'}],
  {title:{text:m+' per scenario'},margin:{t:40,b:120},xaxis:{automargin:true},yaxis:{title:{text:m}}},{responsive:true});
 const sel=document.getElementById('scenario');const keep=sel.value;sel.innerHTML='';
 ok.filter(r=>STUDY.timelines[r.key]).forEach(r=>{const o=document.createElement('option');o.value=r.key;o.textContent=r.__label;sel.appendChild(o);});
 if([...sel.options].some(o=>o.value===keep))sel.value=keep;drawScenario();}
function drawScenario(){const k=document.getElementById('scenario').value;const t=STUDY.timelines[k];
 const el=document.getElementById('timeline');if(!t){Plotly.react(el,[],{title:{text:'no timeline for the chosen scenarios'}});return;}
 const x=t.rates.map((_,i)=>t.t0_ms+(i+0.5)*t.bin_ms);
 Plotly.react(el,[{type:'scatter',mode:'lines',x:x,y:t.rates,name:t.label,line:{width:1}}],
  {title:{text:'Throughput of '+t.label+' ('+t.bin_ms.toFixed(3)+' ms bins)'},xaxis:{title:{text:'time (ms)'}},
   yaxis:{title:{text:'Gbit/s'}},margin:{t:40}},{responsive:true});}
document.querySelectorAll('select.axis,#metric').forEach(s=>s.addEventListener('change',drawStudy));
document.getElementById('scenario').addEventListener('change',drawScenario);
drawStudy();
