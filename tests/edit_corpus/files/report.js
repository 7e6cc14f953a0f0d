var fs = require('fs');
var path = require('path');

function readRows(file) {
    var text = fs.readFileSync(file, 'utf8');
    return text.split('\n').filter(function (line) {
        return line.trim() !== '';
    });
}

function summarize(rows) {
    var total = 0;
    rows.forEach(function (row) {
        var cols = row.split(',');
        total += parseFloat(cols[2]);
    });
    return { count: rows.length, total: total };
}

var file = process.argv[2] || path.join(__dirname, 'data.csv');
var summary = summarize(readRows(file));
console.log('rows: ' + summary.count);
console.log('total: ' + summary.total.toFixed(2));
