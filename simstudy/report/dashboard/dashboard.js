// simstudy dashboard: wiring of controls to Plotly (the plots themselves are Plotly's).
function sortTable(th){const table=th.closest('table');const i=[...th.parentNode.children].indexOf(th);
 const asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';const body=table.tBodies[0];
 const rows=[...body.rows];rows.sort((a,b)=>{const x=a.cells[i].dataset.v??a.cells[i].textContent,
 y=b.cells[i].dataset.v??b.cells[i].textContent;const nx=parseFloat(x),ny=parseFloat(y);
 const c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:String(x).localeCompare(String(y));return asc?c:-c;});
 rows.forEach(r=>body.appendChild(r));}
function pyramidTraces(p,lo,hi){let lv=p.levels[p.levels.length-1];
 for(const l of p.levels){const n=(hi-lo)/l.bin_ms;if(n<=p.shown){lv=l;break;}}
 const n=lv.n;let a=Math.max(0,Math.floor((lo-lv.t0_ms)/lv.bin_ms)-1),b=Math.min(n,Math.ceil((hi-lv.t0_ms)/lv.bin_ms)+1);
 if(!isFinite(a)||!isFinite(b)||b<=a){a=0;b=n;}
 const x=[];for(let k=a;k<b;k++)x.push(lv.t0_ms+(k+0.5)*lv.bin_ms);
 return {bin_ms:lv.bin_ms,traces:Object.keys(lv.rates).map(s=>({type:'scatter',mode:'lines',stackgroup:'one',name:s,
  x:x,y:lv.rates[s].slice(a,b),text:lv.hover.slice(a,b),line:{width:0.5,color:p.colors[s]},
  hovertemplate:'%{x:.3f} ms: %{y:.3f} Gbit/s<br>%{text}<extra>'+s+'</extra>'}))};}
function drawPyramid(id,p){const el=document.getElementById(id);const lv=p.levels[p.levels.length-1];
 const r=pyramidTraces(p,lv.t0_ms,lv.t0_ms+lv.n*lv.bin_ms);
 const layout={title:{text:'Throughput by op, '+r.bin_ms+' ms bins'},xaxis:{title:{text:'time (ms)'}},
  yaxis:{title:{text:'Gbit/s'}},margin:{t:40},hovermode:'closest'};
 Plotly.newPlot(el,r.traces,layout,{responsive:true});el.dataset.binMs=r.bin_ms;
 el.on('plotly_relayout',ev=>{let lo,hi;if(ev['xaxis.range[0]']!==undefined){lo=+ev['xaxis.range[0]'];hi=+ev['xaxis.range[1]'];}
  else if(ev['xaxis.range']){lo=+ev['xaxis.range'][0];hi=+ev['xaxis.range'][1];}
  else if(ev['xaxis.autorange']){lo=lv.t0_ms;hi=lv.t0_ms+lv.n*lv.bin_ms;}else return;
  const q=pyramidTraces(p,lo,hi);if(String(q.bin_ms)===el.dataset.binMs&&!ev['xaxis.autorange']&&q.traces.length&&el.data.length
   &&el.data[0].x.length&&q.traces[0].x[0]===el.data[0].x[0]&&q.traces[0].x.length===el.data[0].x.length)return;
  el.dataset.binMs=q.bin_ms;const lay=Object.assign({},el.layout,{title:{text:'Throughput by op, '+q.bin_ms+' ms bins'}});
  if(!ev['xaxis.autorange'])lay.xaxis=Object.assign({},el.layout.xaxis,{range:[lo,hi],autorange:false});
  Plotly.react(el,q.traces,lay);});}
